"""The reference workload: a prompt set decoded with hooks on, written as a trace.

Runs the configured decoder, then (unless told not to) the same workload without speculation
as the eval gate's reference, and writes eval records for both.
"""

from __future__ import annotations

import json
import os
import platform
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import torch

from .. import schema
from ..collector import evalgate
from ..io.trace import open_writer
from ..hooks import Recorder, every_n
from . import longctx
from .decoder import Output, Request, SpecConfig, SpeculativeDecoder
from .models import ModelPair


def load_prompts(long: bool = False) -> list[dict[str, Any]]:
    """The prompt set shipped with specscope, each with a workload category: math (arithmetic
    and word problems), qa, chat (open questions and multi-turn ``messages``), translation,
    summarization, code, rag (a question over a given context), and the repetitive-text
    categories copy, edit and refactor (the answer repeats most of the prompt: where prompt
    lookup drafts well). A prompt's own ``temperature`` (copy, edit and refactor: 0, decoded
    greedily as editing tools ask for them) overrides the workload's.

    ``long``: also the long-context category (a question over a register of 384 to 3,072
    tokens, three prompts per size; ``longctx``), which a workload takes only when it names it:
    its prompts cost seconds of prefill each and exceed short-context servers."""
    text = resources.files("specscope.engine").joinpath("data/prompts.json").read_text("utf-8")
    prompts = json.loads(text)
    if not long:
        return [p for p in prompts if p.get("category") != "long"]
    return [longctx.expand(p) if p.get("category") == "long" else p for p in prompts]


def host_facts() -> dict[str, Any]:
    """CPU, memory and platform facts of this host (psutil where installed)."""
    facts: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                             "cpu_count": os.cpu_count(), "torch": torch.__version__}
    try:
        import psutil

        facts["memory_bytes"] = psutil.virtual_memory().total
        facts["cpu_count_physical"] = psutil.cpu_count(logical=False)
    except ImportError:
        pass
    return facts


@dataclass
class WorkloadSpec:
    requests: int = 16
    concurrency: int = 4
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    stats_every: int = 1  #: sampling-truth statistics on one verify step in N
    reference: bool = True  #: also decode without speculation, as the eval gate's baseline
    first: int = 0  #: the index of the first prompt taken (a demo's waves walk the set)
    mix: bool = False  #: take the prompts round-robin across categories, not in file order
    #: only these categories, round-robin in this order (implies mix); () = all, in file order
    categories: tuple[str, ...] = ()


#: a tiny random model's prompt: its first 48 byte-tokens; a long-context prompt its size, as
#: far as the model's positions leave room for the output
TINY_PROMPT, TINY_ROOM = 48, 160


def _encode(pair: ModelPair, prompt: str, messages: list[dict] | None = None,
            size: int = 0) -> list[int]:
    """A prompt's tokens; ``messages`` (earlier turns, the last one the prompt) for multi-turn;
    ``size``: a long-context prompt's size in tokens (what a tiny model keeps of it)."""
    if pair.tokenizer is None:  # tiny random models: a deterministic token stream per prompt
        cfg = pair.target.config
        text = " ".join(m["content"] for m in messages) if messages else prompt
        keep = min(size, cfg.max_position_embeddings - TINY_ROOM) if size else TINY_PROMPT
        return [(b * 31 + i * 7) % cfg.vocab_size for i, b in enumerate(text.encode("utf-8"))][:keep]
    ids = pair.tokenizer.apply_chat_template(messages or [{"role": "user", "content": prompt}],
                                             add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)


def detokenizer(pair: ModelPair):
    """Output tokens -> text for the request records, where the pair has a tokenizer."""
    return None if pair.tokenizer is None else (lambda tokens: _decode(pair, tokens))


def _decode(pair: ModelPair, tokens: list[int]) -> str:
    if pair.tokenizer is None:
        return ""
    return pair.tokenizer.decode(tokens, skip_special_tokens=True)


def build_requests(pair: ModelPair, spec: WorkloadSpec) -> tuple[list[Request], dict[str, dict]]:
    prompts = load_prompts(long="long" in spec.categories)
    if spec.mix or spec.categories:
        by_cat: dict[str, list[dict]] = {}
        for p in prompts:
            by_cat.setdefault(p.get("category", ""), []).append(p)
        unknown = [c for c in spec.categories if c not in by_cat]
        if unknown:
            raise ValueError(f"unknown categories {', '.join(unknown)}; the prompt set has "
                             f"{', '.join(sorted(by_cat))}")
        queues = [by_cat[c] for c in spec.categories] if spec.categories else list(by_cat.values())
        prompts = [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]
    reqs, by_id = [], {}
    for i in range(spec.requests):
        p = prompts[(spec.first + i) % len(prompts)]
        by_id[p["id"]] = p
        # a prompt may set its own temperature: copying and editing are decoded greedily
        temp = float(p.get("temperature", spec.temperature))
        reqs.append(Request(f"req-{i:05d}", _encode(pair, p["prompt"], p.get("messages"),
                                                       p.get("context_tokens", 0)),
                            spec.max_new_tokens, temp, spec.top_p if temp > 0 else 1.0,
                            spec.top_k if temp > 0 else 0,
                            prompt_id=p["id"], category=p.get("category", "")))
    return reqs, by_id


def run_record(run_id: str, pair: ModelPair, cfg: SpecConfig, role: str,
                labels: dict[str, str]) -> schema.RunRecord:
    env = {k: v for k, v in os.environ.items() if k.startswith(("SPECSCOPE_", "OMP_", "MKL_"))}
    return schema.RunRecord(
        run_id=run_id, config_id=cfg.config_id,
        algorithm=cfg.algorithm if cfg.num_steps else "none", num_steps=cfg.num_steps,
        topk=cfg.topk if cfg.num_steps else 0, num_verify_tokens=cfg.num_draft_tokens,
        backend="cpu", model=pair.name,
        draft_model=pair.draft_name if cfg.uses_draft_model else "",
        engine="specscope-reference", engine_version=_version(), verify_mode=cfg.verify_mode,
        fault=cfg.fault, started_ns=time.time_ns(), env_flags=env, host=host_facts(),
        # the decoder takes the draft's probabilities through a float32 softmax
        labels={"role": role, **({"draft_dtype": "float32"} if cfg.uses_draft_model else {}),
                **({"spec_policy": cfg.policy} if cfg.policy != "fixed" else {}), **labels})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specscope")
    except PackageNotFoundError:
        return "0+local"


def _decode_all(pair: ModelPair, cfg: SpecConfig, spec: WorkloadSpec, reqs: list[Request],
                recorder: Recorder, progress: Any) -> list[Output]:
    torch.manual_seed(spec.seed)
    decoder = SpeculativeDecoder(pair.target, pair.draft, cfg, recorder=recorder,
                                 eos_ids=pair.eos_ids, seed=spec.seed, detokenize=detokenizer(pair))
    outs: list[Output] = []
    for start in range(0, len(reqs), spec.concurrency):
        wave = reqs[start:start + spec.concurrency]
        outs.extend(decoder.generate(wave))
        progress.update(len(wave))
    return outs


def eval_records(run_id: str, pair: ModelPair, outs: list[Output], prompts: dict[str, dict],
           reqs: list[Request], ref: list[Output] | None) -> list[schema.EvalRecord]:
    records = []
    for k, (req, out) in enumerate(zip(reqs, outs)):
        p = prompts[req.prompt_id]
        text = _decode(pair, out.token_ids)
        exact = None
        if ref is not None and req.temperature <= 0:
            exact = out.token_ids == ref[k].token_ids
        records.append(schema.EvalRecord(
            run_id=run_id, request_id=req.request_id, prompt_id=req.prompt_id, exact_match=exact,
            repetition_loop=evalgate.repetition_loop(out.token_ids),
            invalid=evalgate.invalid_output(text, p.get("answer_format")) if text else None,
            correct=evalgate.correct_output(text, p.get("answer")) if text else None))
    return records


def run_workload(pair: ModelPair, cfg: SpecConfig, spec: WorkloadSpec, out_path: str | Path,
                 *, progress: bool = True, run_id: str = "", sinks: Sequence[Any] = ()) -> Path:
    """Decode the workload with hooks on and write the trace (with the reference run).

    ``sinks`` also receive every record (an in-process Collector, a ZmqSink, ...).
    """
    from tqdm import tqdm

    run_id = run_id or f"{cfg.config_id}{'-' + cfg.fault if cfg.fault else ''}-{uuid.uuid4().hex[:8]}"
    reqs, prompts = build_requests(pair, spec)
    writer = open_writer(out_path)
    out_sinks = [writer, *sinks]
    total = len(reqs) * (2 if spec.reference and cfg.num_steps else 1)
    bar = tqdm(total=total, desc=f"decoding {cfg.config_id}", unit="req", disable=not progress)
    try:
        main = Recorder(run_record(run_id, pair, cfg, "measured", {}), sinks=out_sinks,
                        stats_policy=every_n(spec.stats_every)).start()
        outs = _decode_all(pair, cfg, spec, reqs, main, bar)
        main.close(close_sinks=False)
        ref_outs = None
        if spec.reference and cfg.num_steps:
            ref_id = f"{run_id}/reference"
            ref_cfg = SpecConfig(num_steps=0, verify_mode=cfg.verify_mode)
            ref = Recorder(run_record(ref_id, pair, ref_cfg, "reference",
                                       {"reference_for": run_id}), sinks=out_sinks).start()
            ref_outs = _decode_all(pair, ref_cfg, spec, reqs, ref, bar)
            ref.close(close_sinks=False)
            evals = eval_records(ref_id, pair, ref_outs, prompts, reqs, None)
        else:
            evals = []
        evals += eval_records(run_id, pair, outs, prompts, reqs, ref_outs)
        for sink in out_sinks:
            sink.write(evals)
    finally:
        bar.close()
        writer.close()
    return Path(out_path)

