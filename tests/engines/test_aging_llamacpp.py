"""Acceptance that ages, on the real llama.cpp server (SmolLM2 as target and draft, two slots,
k = 5), seen only through its /metrics page as ``specscope scrape`` polls it: a clean stretch
with a restart in it (a new server on the same port, which the scrape sees as counters that go
down), then the tests' patch's ``acceptance_decay`` (each draft spoiled with a chance that grows
with the drafts made since it was switched on; verify untouched). Each 40-second stretch is read as
an hour (its clock scaled 90 times, as ``report --clock-scale`` does): the decay is flagged, the clean
stretch and its restart never."""

from __future__ import annotations

import io
import os
import re
import threading
import time
import urllib.request
from pathlib import Path

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
#: the decay's chance of a spoiled draft reaches 1 after this many stretches' drafts (measured
#: on the clean stretch: about 0.8 of them at its end, whatever the machine's speed)
DECAY_STRETCHES = 1.3


def _traffic(url: str, prompts: list[str], seconds: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        drive(url, "smollm2", prompts, sampling=({"temperature": 0.0},), concurrency=2,
              max_tokens=48, extra={"ignore_eos": True})


def _drafts(url: str) -> int:
    page = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return int(float(re.search(r"^llamacpp:spec_decode_num_drafts(?:_total)? (\S+)$", page, re.M)[1]))


def _switch(path: Path, text: str) -> None:
    """The fault file replaced whole (the server never reads it half written)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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
        port = srv.port
        srv.stop()
        srv = server(port)  # a clean restart, inside the clean stretch
        assert srv.port == port  # (the scrape polls that port)
        before, t = _drafts(srv.url), time.monotonic()
        _traffic(srv.url, prompts[:8], STRETCH_S / 2)
        per_s = (_drafts(srv.url) - before) / (time.monotonic() - t)
        decay_drafts = max(100, round(per_s * STRETCH_S * DECAY_STRETCHES))
        _switch(fault, f"acceptance_decay {decay_drafts}\n")
        decay_from = time.time_ns()
        _traffic(srv.url, prompts[:8], STRETCH_S)
        decay_to = time.time_ns()
    finally:
        stop.set()
        scraper.join(timeout=10)
        srv.stop()
    print(f"the decay: over {decay_drafts} drafts ({per_s:.1f} drafts a second when clean)")
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
