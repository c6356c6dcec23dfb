"""make demo's engine: four configurations (one with a seeded fault, one target-only, one n-gram), the collector, /metrics and
the dashboard; the fault is flagged; Ctrl-C stops everything cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

from tests.conftest import ROOT


def _get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def test_demo_flags_the_fault_and_stops_cleanly(tmp_path, free_port):
    from specscope.serving.harness import free_port as pick

    metrics_port = pick()
    proc = subprocess.Popen([sys.executable, "-m", "specscope", "demo", "--model", "tiny",
                             "--duration", "300", "--no-prometheus", "--no-sweep", "--port", str(free_port),
                             "--metrics-port", str(metrics_port), "-o", str(tmp_path / "demo")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("silent greedy flagged"):
                break
        assert any(x.startswith("silent greedy flagged") for x in lines), "".join(lines)
        metrics = _get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert 'specscope_anomaly_active{' in metrics and 'kind="silent_greedy"' in metrics
        assert "<title>specscope demo</title>" in _get(f"http://127.0.0.1:{free_port}/")
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "stopped after" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == [
        "eagle-s2-k1-d3-silent_greedy_batch_gt2.jsonl", "eagle-s3-k1-d4-batch1k3_8k2.jsonl", "ngram-s4-k1-d5.jsonl",
        "no-spec.jsonl"]


def test_stopping_the_background_sweep_stops_its_servers_too(tmp_path):
    """The demo's sweep starts a serve-engine per point; stopping the demo stops its whole
    session, children included (a stand-in parent that starts a child and sleeps)."""
    import os

    from specscope.demo import _stop_group

    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(300)']); open(sys.argv[1], 'w').write(str(c.pid)); "
            "time.sleep(300)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(pid_file)], start_new_session=True)
    deadline = time.time() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    _stop_group(proc)
    assert proc.poll() is not None
    time.sleep(0.5)
    try:
        os.kill(child, 0)
        with open(f"/proc/{child}/stat") as f:  # gone, or a zombie awaiting its reaper
            assert f.read().split()[2] == "Z"
    except (ProcessLookupError, FileNotFoundError):
        pass
