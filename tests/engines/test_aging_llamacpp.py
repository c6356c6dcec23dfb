"""Acceptance that ages, on the real llama.cpp server (SmolLM2 as target and draft, two slots,
k = 5), seen only through its /metrics page as ``specscope scrape`` polls it: a clean stretch
with a restart in it (a new server on the same port, which the scrape sees as counters that go
down), then the tests' patch's ``acceptance_decay`` (each draft spoiled with a chance that grows
with the drafts made since it was switched on; verify untouched). Each 40-second stretch is read as
an hour (its clock scaled 90 times, as ``report --clock-scale`` does): the decay is flagged, the clean
stretch and its restart never."""

from __future__ import annotations

import io
import threading
import time

import pytest

from specscope import schema
from specscope.collector.detectors import DriftDetector
from specscope.collector.drift import drift
from specscope.io.clock import scale_clock
from specscope.io.trace import read_trace
from specscope.scrape import scrape
from specscope.serving.llamacpp import LlamaCppServer
from specscope.serving.vllm import drive

pytestmark = [pytest.mark.slow, pytest.mark.long]
#: seconds of traffic a stretch, read as an hour
STRETCH_S = 40.0
SCALE = 3600 / STRETCH_S
#: the drafts over which the decay's chance of a spoiled draft grows to 1
DECAY_DRAFTS = 800


def _traffic(url: str, prompts: list[str], seconds: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        drive(url, "smollm2", prompts, sampling=({"temperature": 0.0},), concurrency=2,
              max_tokens=48, extra={"ignore_eos": True})


def _stretch(records: list, since: int, until: int) -> list:
    return [r for r in records
            if not isinstance(r, schema.SpecCountsRecord) or since <= r.t_ns < until]


def test_acceptance_that_ages_is_flagged_on_llamacpp_and_a_clean_restart_is_not(
        llama_server, smollm2_gguf_file, prompts, tmp_path):
    fault = tmp_path / "fault"
    fault.write_text("")

    def server(port: int | None = None) -> LlamaCppServer:
        srv = LlamaCppServer(model=smollm2_gguf_file, draft=smollm2_gguf_file, k=5, slots=2,
                             binary=llama_server, log=tmp_path / "server.log")
        if port is not None:
            srv.port = port
        return srv.start(env={"SPECSCOPE_LLAMACPP_FAULT_FILE": str(fault)})

    srv = server()
    stop = threading.Event()
    out = tmp_path / "scrape.jsonl"
    scraper = threading.Thread(target=scrape, args=([srv.url + "/metrics"], out),
                               kwargs={"interval_s": 1.0, "stop": stop, "log": io.StringIO()},
                               daemon=True)
    try:
        scraper.start()
        _traffic(srv.url, prompts[:8], 3)  # warm-up, outside both stretches
        clean_from = time.time_ns()
        _traffic(srv.url, prompts[:8], STRETCH_S / 2)
        srv.stop()
        srv = server(srv.port)  # a clean restart, inside the clean stretch
        _traffic(srv.url, prompts[:8], STRETCH_S / 2)
        fault.write_text(f"acceptance_decay {DECAY_DRAFTS}\n")
        decay_from = time.time_ns()
        _traffic(srv.url, prompts[:8], STRETCH_S)
        decay_to = time.time_ns()
    finally:
        stop.set()
        scraper.join(timeout=10)
        srv.stop()
    records = list(read_trace(out).records)
    runs = [r for r in records if isinstance(r, schema.RunRecord)]
    assert len({r.started_ns for r in runs}) >= 2, runs  # the restart was seen
    found = {}
    for name, since, until in (("clean", clean_from, decay_from), ("decay", decay_from, decay_to)):
        stretch = _stretch(records, since, until)
        windows = [r for r in stretch if isinstance(r, schema.SpecCountsRecord)]
        drafted = sum(r.num_draft_tokens or 0 for r in windows)
        accepted = sum(r.num_accepted or 0 for r in windows)
        found[name] = DriftDetector().check(scale_clock(stretch, SCALE), "llamacpp")
        print(f"{name}: {len(windows)} windows, {accepted}/{drafted} draft tokens accepted;",
              [a.message for a in found[name]])
    assert found["clean"] == []
    assert drift(scale_clock(_stretch(records, clean_from, decay_from), SCALE)).restarts == 1
    assert found["decay"], "the decay was not flagged"
