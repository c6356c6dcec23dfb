"""``specscope profile``: the reference workload under torch.profiler, phases annotated.

Writes a Chrome/Perfetto trace (open it in ui.perfetto.dev or chrome://tracing; the Kineto
importer reads it back) and returns the phase breakdown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..collector.phases import phase_breakdown
from ..hooks import Recorder
from .decoder import SpecConfig, SpeculativeDecoder
from .models import ModelPair
from .workload import WorkloadSpec, run_record, build_requests


def profile_workload(pair: ModelPair, cfg: SpecConfig, spec: WorkloadSpec,
                     chrome_trace: str | Path) -> tuple[dict[str, Any], list[Any]]:
    """Decode ``spec.requests`` requests under the profiler; (breakdown, records)."""
    from torch.profiler import ProfilerActivity, profile

    run = run_record(f"profile-{cfg.config_id}", pair, cfg, "profile", {})
    device = "cuda" if torch.cuda.is_available() and next(pair.target.parameters()).is_cuda else "cpu"
    rec = Recorder(run, device=device)
    rec.phases.annotate = True
    reqs, _ = build_requests(pair, spec)
    decoder = SpeculativeDecoder(pair.target, pair.draft, cfg, recorder=rec, eos_ids=pair.eos_ids,
                                 seed=spec.seed, device=device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    records: list[Any] = []
    with profile(activities=activities) as prof:
        for start in range(0, len(reqs), spec.concurrency):
            decoder.generate(reqs[start:start + spec.concurrency])
            records += rec.drain()
    records += rec.drain(wait=True)
    Path(chrome_trace).parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(chrome_trace))
    return phase_breakdown(records), records
