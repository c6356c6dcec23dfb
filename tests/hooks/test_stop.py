"""A process stopped right after its last verify step: by a SIGTERM it sees (the recorder's tail
handed over, then the engine's own handler) and by a SIGKILL (the drain's window). Each stop is
a real signal to a real child process recording steps into a JSONL trace."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from specscope import schema
from specscope.hooks.stop import STOP_BOUND_S, chain_stop
from specscope.io.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]
STEPS = 30

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    import torch
    from specscope import schema
    from specscope.hooks import Recorder
    from specscope.hooks.stop import chain_stop
    from specscope.io.trace import TraceWriter

    trace, engine_handler, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if engine_handler != "default":
        def engine_stops(signum, frame):  # as vLLM's engine core: note it, then end at once
            with open(engine_handler, "w") as f:
                f.write(str(signum))
            os._exit(0)
        signal.signal(signal.SIGTERM, engine_stops)
    run = schema.RunRecord(run_id="stop", config_id="c", algorithm="eagle", num_steps=2, topk=1,
                           num_verify_tokens=3, backend="cpu", model="m")
    rec = Recorder(run, sinks=[TraceWriter(trace)]).start()
    chain_stop(rec)
    logits = torch.randn(2, 3, 40)
    for step in range(steps):  # a busy engine: a step every 10 ms
        rec.record_verify(request_ids=["a", "b"], num_accepted=torch.tensor([1, 2]),
                          num_drafted=2, temperature=[0.0, 0.8], committed_tokens=
                          logits.argmax(-1), target_logits=logits, step=step)
        time.sleep(0.01)
    print("last step", flush=True)
    while True:  # the engine waits for work; only a signal ends it
        time.sleep(0.001)
""")


def child(tmp_path: Path, engine_handler: str) -> tuple[subprocess.Popen, Path]:
    trace = tmp_path / "engine.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(trace), engine_handler, str(STEPS)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    proc.stdout.close()
    assert line == "last step", line
    return proc, trace


def held(trace: Path) -> tuple[int, schema.HookHealthRecord]:
    """The trace's verify steps, and its last health record, which must count them all and
    come after the last of them."""
    records = read_trace(trace).records
    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    health = [r for r in records if isinstance(r, schema.HookHealthRecord)]
    assert health, "no health record"
    last = health[-1]
    assert last.num_recorded == len(steps) and last.t_ns >= max(s.t_ns for s in steps), last
    return len(steps), last


def test_a_sigterm_hands_the_tail_over_then_the_engines_own_handler_runs(tmp_path):
    """The engine's handler ends the process at once (``os._exit``), as vLLM's does past its
    shutdown timeout: every step and a health snapshot counting them are in the trace, the
    engine's handler ran, and the stop waited at most ``STOP_BOUND_S`` for the hand-over."""
    marker = tmp_path / "engine-handler"
    proc, trace = child(tmp_path, str(marker))
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    took = time.monotonic() - t0
    print(f"SIGTERM to exit: {1e3 * took:.0f} ms (bound {1e3 * STOP_BOUND_S:.0f} ms)")
    assert marker.read_text() == str(int(signal.SIGTERM))  # chained, never replaced
    assert held(trace)[0] == STEPS


def test_a_sigterm_to_a_process_without_a_handler_still_ends_it_by_that_signal(tmp_path):
    proc, trace = child(tmp_path, "default")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # as without specscope
    assert held(trace)[0] == STEPS


def test_a_sigkill_after_the_last_step_leaves_only_the_drains_window(tmp_path):
    """SIGKILL cannot be seen: the drain's own pace must have put the last step, and a health
    snapshot that counts it, on disk by then. The window is at most ``IDLE_S +
    BUSY_INTERVAL_S`` (45 ms) on an idle machine; the kill comes 250 ms after the last step,
    so a loaded machine's scheduling delays do not decide the test."""
    proc, trace = child(tmp_path, "default")
    time.sleep(0.25)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    n, health = held(trace)
    assert n == STEPS and not health.final


def test_the_chain_is_installed_from_the_main_thread_only(run_record):
    from specscope.hooks import Recorder

    rec = Recorder(run_record)
    before = signal.getsignal(signal.SIGTERM)
    got: list = []
    t = threading.Thread(target=lambda: got.append(chain_stop(rec)))
    t.start()
    t.join()
    assert got == [False] and signal.getsignal(signal.SIGTERM) is before
    rec.close()
