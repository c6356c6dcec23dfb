"""Spec-Bench model-answer JSONL: one request per answer, its category kept.

Each line has ``question_id``, ``category``, ``model_id``, ``tstamp`` and ``choices[0]`` with,
per turn, ``decoding_steps``, ``new_tokens`` and ``wall_time``, and ``accept_lengths``: one
entry per decoding step over all turns, bonus token included (Spec-Bench's own acceptance
length is sum(new_tokens) / sum(decoding_steps)). Drafted tokens are not recorded, so the
acceptance rate stays null. A vanilla answer file (every accept length 1, steps = tokens) is
the no-speculation baseline: its run is ``algorithm: none`` and its requests carry no
speculative figures.
"""

from __future__ import annotations

import os
from collections import Counter

from .. import schema
from ..schema import Problem
from ._common import ImportResult, run_record
from .responses import MAX_DEPTH, iter_objects


def sniff(obj: object) -> bool:
    if not isinstance(obj, dict) or "question_id" not in obj:
        return False
    choices = obj.get("choices")
    if not choices:
        return False
    return isinstance(choices[0], dict) and "decoding_steps" in choices[0]


def parse(path: str | os.PathLike, run_id: str) -> ImportResult:
    res = ImportResult("specbench")
    name = str(path)
    rows = []
    model = ""
    for lineno, obj in iter_objects(path, res):
        try:
            c = obj["choices"][0]
            steps = sum(int(x) for x in c["decoding_steps"])
            tokens = sum(int(x) for x in c["new_tokens"])
            lengths = [int(x) for x in c.get("accept_lengths") or []]
            wall = sum(float(x) for x in c.get("wall_time") or [])
            if any(not 0 <= x <= MAX_DEPTH + 1 for x in lengths):
                raise ValueError(f"an accept length outside 0..{MAX_DEPTH + 1}")
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            res.problems.append(Problem(name, lineno, f"not a Spec-Bench answer: {exc!r}"))
            continue
        model = str(obj.get("model_id", model))
        if lengths:
            res.identity("sum of accept_lengths = new tokens", sum(lengths), tokens, line=lineno, file=name)
            res.identity("accept_lengths entries = decoding steps", len(lengths), steps, line=lineno, file=name)
        rows.append((lineno, obj, steps, tokens, lengths, wall))
    vanilla = bool(rows) and all(steps == tokens for _, _, steps, tokens, _, _ in rows)
    for lineno, obj, steps, tokens, lengths, wall in rows:
        finish = int(float(obj.get("tstamp", 0)) * 1e9)
        hist = Counter(lengths)
        res.add(schema.RequestRecord(
            run_id=run_id, rank=0, request_id=str(obj.get("question_id", lineno)),
            prompt_id=str(obj.get("question_id", "")), category=str(obj.get("category", "")),
            t_arrival_ns=finish - int(wall * 1e9) if finish and wall else 0, t_first_token_ns=0,
            t_finish_ns=finish if wall else 0, num_prompt_tokens=0, num_output_tokens=tokens,
            num_verify_steps=None if vanilla else steps,
            num_accepted=None if vanilla else tokens - steps,
            accept_len_hist=() if vanilla or not hist else
            tuple(hist.get(i, 0) for i in range(max(hist) + 1))))
    if not vanilla and rows:
        res.add(schema.SpecCountsRecord(
            run_id=run_id, t_ns=0, num_drafts=sum(r[2] for r in rows),
            num_accepted=sum(r[3] - r[2] for r in rows),
            source=f"specbench: sum over {len(rows)} answers (drafted not recorded)"))
        res.trap("specbench-no-drafted", "Spec-Bench records tokens per decoding step (bonus "
                 "included) but not how many were drafted: acceptance rate stays null")
    res.add(run_record(run_id, "spec-bench", "specbench", path, model=model,
                       algorithm="none" if vanilla else "unknown",
                       labels={"role": "baseline"} if vanilla else None))
    return res
