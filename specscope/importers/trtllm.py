"""TensorRT-LLM iteration statistics (``specDecodingStats``) into windows, one per iteration.

Input: what ``trtllm-serve``'s ``/metrics`` JSON endpoint or ``LLM.get_stats()`` returned,
saved as a JSON list or JSONL (entries may be JSON strings). Per iteration:
``specDecodingStats.numRequestsWithDraftTokens`` are the drafts (request-steps),
``numDraftTokens`` the drafted tokens, ``numAcceptedTokens`` the accepted ones (bonus
excluded), ``acceptanceLength`` the engine's 1 + accepted / drafts (0.0 on iterations without
drafts, kept as unknown here). That endpoint drains what it returns: specscope never polls it
unless asked, and a saved file holds only what its reader received.
"""

from __future__ import annotations

import datetime as _dt
import json
import os

from .. import schema
from ..schema import Problem
from ._common import ImportResult, run_record, to_ns
from .responses import iter_objects


def sniff(obj: object) -> bool:
    first = obj[0] if isinstance(obj, list) and obj else obj
    if isinstance(first, str):
        try:
            first = json.loads(first)
        except json.JSONDecodeError:
            return False
    return isinstance(first, dict) and ("specDecodingStats" in first or
                                        ("iter" in first and "iterLatencyMS" in first))


def _time(stamp: object) -> int:
    if not isinstance(stamp, str):
        return 0
    for fmt in ("%m-%d-%Y %H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"):
        try:
            return to_ns(_dt.datetime.strptime(stamp.split(".")[0], fmt))
        except ValueError:
            continue
    return 0


def parse(path: str | os.PathLike, run_id: str) -> ImportResult:
    res = ImportResult("trtllm-iteration-stats")
    name = str(path)
    for where, obj in iter_objects(path, res):
        if isinstance(obj, str):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as exc:
                res.problems.append(Problem(name, where, f"entry is a string but not JSON: {exc.msg}"))
                continue
        if not isinstance(obj, dict):
            res.problems.append(Problem(name, where, "expected an iteration object"))
            continue
        t_ns = _time(obj.get("timestamp"))
        spec = obj.get("specDecodingStats")
        if isinstance(spec, dict):
            try:
                drafts = int(spec["numRequestsWithDraftTokens"])
                drafted, accepted = int(spec["numDraftTokens"]), int(spec["numAcceptedTokens"])
            except (KeyError, TypeError, ValueError) as exc:
                res.problems.append(Problem(name, where, f"specDecodingStats without {exc}"))
                continue
            al = spec.get("acceptanceLength")
            al = float(al) if isinstance(al, (int, float)) and drafts else None
            if drafts:
                res.identity("acceptanceLength = 1 + accepted / drafts", al, 1 + accepted / drafts,
                             line=where, file=name, tol=1e-3)
            res.add(schema.SpecCountsRecord(
                run_id=run_id, t_ns=t_ns, num_drafts=drafts, num_draft_tokens=drafted,
                num_accepted=accepted, reported_mean_acceptance_length=al, source="trtllm-iteration"))
        values = {k: float(obj[k]) for k in ("iterLatencyMS", "numActiveRequests", "numQueuedRequests")
                  if isinstance(obj.get(k), (int, float))}
        if values:
            res.add(schema.SampleRecord(run_id=run_id, t_ns=t_ns, values={
                {"iterLatencyMS": "iteration_ms"}.get(k, k): v for k, v in values.items()},
                source="trtllm-iteration"))
    res.trap("trtllm-drained", "TensorRT-LLM's iteration statistics are drained by each read: "
             "this file holds only what its reader received, not the whole run")
    res.add(run_record(run_id, "tensorrt-llm", "trtllm-iteration-stats", path))
    return res
