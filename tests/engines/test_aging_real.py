"""Acceptance that ages, on a real vLLM (CPU build, SmolLM2 with its 4-bit copy as the draft,
k = 3): a minute of clean traffic, then a minute with the plugin's ``acceptance_decay`` (each
row's drafts rejected with a chance that grows with the steps served since it was switched on),
each window read with its clock scaled 60 times (a minute as an hour of uptime, as
``report --clock-scale`` does). The decay is flagged, the clean window never. ``specscope
scrape`` polls the server meanwhile: its run starts at the engine's own process start."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest

from specscope import schema
from specscope.collector.detectors import DriftDetector
from specscope.hooks.engines import process_started_ns
from specscope.io.clock import scale_clock
from specscope.io.trace import read_trace
from specscope.probe.workload import REPETITIVE
from specscope.scrape import scrape
from specscope.serving.vllm import VllmServer, drive, speculative_config
from tests.engines.test_verify_truth_real import window
from tests.engines.test_vllm_real import trace_records

pytestmark = [pytest.mark.slow, pytest.mark.long]
#: seconds of traffic a window (read as an hour)
MINUTE = 60.0


def _traffic(srv, seconds: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        drive(srv.url, str(srv.model), list(REPETITIVE) * 2, sampling=({"temperature": 0.0},),
              concurrency=4, max_tokens=48, extra={"ignore_eos": True})


def _findings(folder: Path, since: int, until: int) -> list[schema.AnomalyRecord]:
    records = [r for r in window(trace_records(folder), since)
               if not isinstance(r, schema.VerifyStepRecord) or r.t_ns < until]
    return DriftDetector().check(scale_clock(records, 60.0), "vllm")


def test_acceptance_that_ages_is_flagged_on_the_real_vllm_and_its_clean_minute_is_not(
        vllm_env, smollm2_checkpoints, tmp_path):
    target, draft = smollm2_checkpoints
    switch = tmp_path / "faults"
    switch.write_text("")
    srv = VllmServer(model=target, spec=speculative_config("draft_model", draft=draft, k=3),
                     python=vllm_env, trace_dir=tmp_path / "trace", log=tmp_path / "vllm.log",
                     env={"SPECSCOPE_TEST_FAULT_FILE": str(switch), "SPECSCOPE_TEST_FIX": "cpu_expand"})
    stop = threading.Event()
    try:
        srv.start()
        scraper = threading.Thread(target=scrape, args=([srv.url + "/metrics"], tmp_path / "s.jsonl"),
                                   kwargs={"interval_s": 2.0, "stop": stop, "log": io.StringIO()},
                                   daemon=True)
        scraper.start()
        started = process_started_ns(srv.proc.pid)
        _traffic(srv, 5)  # warm-up, outside both windows
        clean_from = time.time_ns()
        _traffic(srv, MINUTE)
        switch.write_text("acceptance_decay")
        decay_from = time.time_ns()
        _traffic(srv, MINUTE)
        decay_to = time.time_ns()
    finally:
        stop.set()
        switch.write_text("")
        srv.stop()
    folder = tmp_path / "trace"
    clean = _findings(folder, clean_from, decay_from)
    decay = _findings(folder, decay_from, decay_to)
    for name, since, until in (("clean", clean_from, decay_from), ("decay", decay_from, decay_to)):
        steps = [r for r in window(trace_records(folder), since)
                 if isinstance(r, schema.VerifyStepRecord) and r.t_ns < until]
        print(f"{name}: {len(steps)} verify steps")
    for a in decay:
        print(a.message)
    assert clean == [], [a.message for a in clean]
    assert decay and all(a.evidence["relative_per_h"] < 0 for a in decay), decay
    # the hooks' run starts at each engine process's start: the API server's, then its engine
    # core's (a child started within the server's start-up), both before the traffic
    runs = [r for r in trace_records(folder) if isinstance(r, schema.RunRecord)]
    print("server process start", started, "runs' starts", [r.started_ns for r in runs])
    assert runs and all(0 <= r.started_ns - started < 300e9 for r in runs)
    assert max(r.started_ns for r in runs) < clean_from
    # scrape reads vLLM's process_start_time_seconds: the API server's start (to its 10 ms)
    scraped = read_trace(tmp_path / "s.jsonl").of(schema.RunRecord)
    print("scraped runs' starts", [r.started_ns for r in scraped])
    assert len(scraped) == 1 and abs(scraped[0].started_ns - started) <= 2e7
