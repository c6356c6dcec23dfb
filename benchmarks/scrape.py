"""The cost of ``specscope scrape``: 50 endpoints of real-sized vLLM pages every 5 s.

The pages are the real vLLM page in ../shared/samples padded to ~2,000 lines with copies of its
histograms under another label (the size of a busy production page), served by another process
on 50 ports with spec-decode counters advancing per request. Cost is the scraper's own CPU time
(``getrusage`` of this process, which does nothing else) per second of wall time. The peer does
the same fetches on the same schedule and parses each page with prometheus_client's parser,
writing nothing.
"""

from __future__ import annotations

import io
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import Row

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "samples" / "vllm_metrics_scrape_specdecode_1.txt"
N_ENDPOINTS, INTERVAL_S, ROUNDS = 50, 5.0, 4

SERVER = r"""
import re, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
page = open(sys.argv[1]).read()
spec = re.compile(r"^(vllm:spec_decode_\w+_total\{[^}]*\}) (\S+)$", re.M)
servers = []
for _ in range(int(sys.argv[2])):
    n = [0]
    class H(BaseHTTPRequestHandler):
        count = n
        def do_GET(self):
            self.count[0] += 1
            k = self.count[0]
            body = spec.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * k}", page).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    s = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    servers.append(s)
print(" ".join(str(s.server_port) for s in servers), flush=True)
sys.stdin.read()
"""


def _page(lines: int = 2000) -> str:
    text = SAMPLE.read_text()
    hist = [x for x in text.splitlines() if x.startswith("vllm:") and "spec_decode" not in x
            and "{" in x]
    out, i = [text.rstrip("\n")], 0
    while sum(p.count("\n") + 1 for p in out) < lines:
        out.append("\n".join(x.replace("{", f'{{shard="{i}",', 1) for x in hist))
        i += 1
    return "\n".join(out) + "\n"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _ours(urls: list[str], out: str) -> tuple[float, float]:
    from specscope.scrape import scrape

    c, t = _cpu(), time.monotonic()
    scrape(urls, out, interval_s=INTERVAL_S, rounds=ROUNDS, log=io.StringIO())
    return _cpu() - c, time.monotonic() - t


def _peer(urls: list[str]) -> tuple[float, float]:
    from prometheus_client.parser import text_string_to_metric_families

    def one(url: str) -> int:
        with urllib.request.urlopen(url, timeout=3) as r:
            text = r.read().decode()
        return sum(len(f.samples) for f in text_string_to_metric_families(text))

    c, t = _cpu(), time.monotonic()
    with ThreadPoolExecutor(max_workers=32) as pool:
        for i in range(ROUNDS):
            t_round = time.monotonic()
            list(pool.map(one, urls))
            if i < ROUNDS - 1:
                time.sleep(max(0.0, INTERVAL_S - (time.monotonic() - t_round)))
    return _cpu() - c, time.monotonic() - t


def bench_scrape(reps: int) -> list[Row]:
    if not SAMPLE.exists():
        return [Row("scrape 50 vLLM endpoints every 5 s", "skipped: ../shared/samples absent",
                    "", "", "≤ 5% of one core", "n/a", "")]
    tmp = tempfile.mkdtemp(prefix="specscope-scrape-")
    page_path = os.path.join(tmp, "page.txt")
    page = _page()
    Path(page_path).write_text(page)
    srv = subprocess.Popen([sys.executable, "-c", SERVER, page_path, str(N_ENDPOINTS)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        urls = [f"http://127.0.0.1:{p}/metrics" for p in srv.stdout.readline().split()]
        ours, peer = [], []
        for i in range(min(reps, 3)):  # interleaved pairs
            cpu, wall = _ours(urls, os.path.join(tmp, f"scrape-{i}.jsonl"))
            ours.append(cpu / wall)
            cpu, wall = _peer(urls)
            peer.append(cpu / wall)
    finally:
        srv.stdin.close()
        srv.wait(timeout=10)
    o, p = statistics.median(ours), statistics.median(peer)
    return [Row(
        f"scrape {N_ENDPOINTS} vLLM endpoints ({page.count(chr(10))}-line pages, the real page "
        f"padded with its histograms; served by another process) every {INTERVAL_S:.0f} s, "
        f"{ROUNDS} rounds, writing the trace: the scraper's own CPU per second of wall time",
        f"{o * 100:.2f}% of one core", f"{p * 100:.2f}%: the same fetches parsed by "
        "prometheus_client, nothing written", f"{o / p:.2f}x", "≤ 5% of one core",
        "met" if o <= 0.05 else "not met",
        f"{', '.join(f'{x * 100:.2f}%' for x in ours)} over {len(ours)} interleaved pairs")]
