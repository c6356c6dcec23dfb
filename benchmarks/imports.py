"""Log import at disk speed: vLLM and SGLang server logs, each beside a bare regex scan of the
same file, on the line mix a real server writes and on logs of nothing but spec-decode lines.

Every arm runs in a fresh interpreter and times itself (interpreter start and imports left
out); arms alternate import, scan, import, scan, ... and the median is reported with its
spread. Peak RSS is the child's VmHWM.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile

from .common import Row, _child

#: per logging interval (vLLM logs stats every 10 s): one SpecDecoding and one Engine line
#: among 98 per-request access lines, i.e. ~10 requests/s finishing
OTHER_PER_INTERVAL = 98


def vllm_spec_line(rnd: random.Random, i: int) -> str:
    drafts = rnd.randint(1000, 20000)
    acc = [int(drafts * r) for r in (0.66, 0.42, 0.26)]
    return (f"(APIServer pid=114) INFO 05-29 13:{(i // 600) % 60:02d}:{(i // 10) % 60:02d} "
            f"[metrics.py:101] SpecDecoding metrics: Mean acceptance length: {1 + sum(acc) / drafts:.2f}, "
            f"Accepted throughput: 1462.92 tokens/s, Drafted throughput: 3303.12 tokens/s, Accepted: "
            f"{sum(acc)} tokens, Drafted: {drafts * 3} tokens, Per-position acceptance rate: "
            f"{acc[0] / drafts:.3f}, {acc[1] / drafts:.3f}, {acc[2] / drafts:.3f}, Avg Draft "
            f"acceptance rate: {100 * sum(acc) / (3 * drafts):.1f}%\n")


VLLM_ENGINE = ("(APIServer pid=114) INFO 05-29 13:31:07 [loggers.py:271] Engine 000: Avg prompt "
               "throughput: 4805.4 tokens/s, Avg generation throughput: 2566.1 tokens/s, Running: 31 "
               "reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%\n")
VLLM_ACCESS = ('(APIServer pid=114) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" '
               "200 OK\n")


def sglang_decode_line(rnd: random.Random, i: int) -> str:
    return (f"[2025-06-15 10:{(i // 600) % 60:02d}:{(i // 10) % 60:02d} TP0] Decode batch. #running-req: "
            f"{rnd.randint(1, 64)}, #token: {rnd.randint(1000, 90000)}, token usage: 0.05, accept len: "
            f"{rnd.uniform(1.5, 3.5):.2f}, gen throughput (token/s): {rnd.uniform(500, 3000):.2f}, "
            "#queue-req: 0\n")


SGLANG_PREFILL = ("[2025-06-15 10:23:40 TP0] Prefill batch. #new-seq: 1, #new-token: 1024, "
                  "#cached-token: 0, token usage: 0.00, #running-req: 31, #queue-req: 0\n")
SGLANG_ACCESS = '[2025-06-15 10:23:40] INFO:     127.0.0.1:40012 - "POST /generate HTTP/1.1" 200 OK\n'


def write_log(path: str, engine: str, n_lines: int, mix: bool) -> None:
    rnd = random.Random(0)
    spec = vllm_spec_line if engine == "vllm" else sglang_decode_line
    second = VLLM_ENGINE if engine == "vllm" else SGLANG_PREFILL
    other = VLLM_ACCESS if engine == "vllm" else SGLANG_ACCESS
    period = OTHER_PER_INTERVAL + 2
    with open(path, "w") as f:
        for i in range(n_lines):
            if not mix or i % period == 0:
                f.write(spec(rnd, i))
            elif i % period == 1:
                f.write(second)
            else:
                f.write(other)


def _timed(code: str, setup: str = "") -> tuple[float, float]:
    """(seconds the code took inside a fresh interpreter after ``setup`` ran, its peak RSS MiB)."""
    _, rss, out = _child(setup + "\nimport time\n_t = time.perf_counter()\n" + code +
                         "\nprint(time.perf_counter() - _t)")
    return float(out.strip().splitlines()[-1]), rss


def _arms(log: str, out: str, reps: int) -> tuple[list[float], list[float], float, float]:
    imp = f"import_files([{log!r}], {out!r})"
    scan = (f"rx = re.compile('Decode batch|SpecDecoding')\n"
            f"n = sum(1 for line in open({log!r}) if rx.search(line))")
    t_imp, t_scan, rss_imp, rss_scan = [], [], 0.0, 0.0
    for _ in range(reps):
        if os.path.isdir(out):
            import shutil
            shutil.rmtree(out)
        t, rss_imp = _timed(imp, "from specscope.importers import import_files")
        t_imp.append(t)
        t, rss_scan = _timed(scan, "import re")
        t_scan.append(t)
    return t_imp, t_scan, rss_imp, rss_scan


def _spread(xs: list[float], n: int) -> str:
    return f"{n / max(xs) / 1e3:.0f}-{n / min(xs) / 1e3:.0f} k lines/s"


def bench_logs(reps: int) -> list[Row]:
    rows = []
    tmp = tempfile.mkdtemp(prefix="specscope-logs-")
    reps = max(3, min(reps, 5))
    for engine in ("vllm", "sglang"):
        # the mix a real server writes: 1 M lines, and 250 k to show memory stays flat
        log, small = os.path.join(tmp, f"{engine}-mix.log"), os.path.join(tmp, f"{engine}-mix-250k.log")
        n = 1_000_000
        write_log(log, engine, n, mix=True)
        write_log(small, engine, n // 4, mix=True)
        t_imp, t_scan, rss, rss_scan = _arms(log, os.path.join(tmp, f"{engine}-mix.jsonl"), reps)
        _, _, rss_small, _ = _arms(small, os.path.join(tmp, f"{engine}-small.jsonl"), 1)
        lps, scan_lps = n / statistics.median(t_imp), n / statistics.median(t_scan)
        times = statistics.median(t_imp) / statistics.median(t_scan)
        met = lps >= 500e3 and times <= 5
        rows.append(Row(
            f"import a 1 M-line {engine} server log, the mix a server writes (per logging interval one "
            f"{'SpecDecoding and one Engine' if engine == 'vllm' else 'Decode batch and one Prefill batch'} "
            f"line among {OTHER_PER_INTERVAL} access lines) to a JSONL trace; peak RSS at 1 M vs 250 k lines",
            f"{lps / 1e3:.0f} k lines/s ({rss:.0f} MiB vs {rss_small:.0f} MiB)",
            f"{scan_lps / 1e3:.0f} k lines/s: a bare regex scan of the same file ({rss_scan:.0f} MiB)",
            f"{times:.1f}x the scan's time", "≥ 500 k lines/s and ≤ 5x the scan",
            "met" if met else "not met", f"{_spread(t_imp, n)} over {reps} runs, in-process time"))
        # nothing but spec-decode lines
        log = os.path.join(tmp, f"{engine}-all.log")
        n = 500_000
        write_log(log, engine, n, mix=False)
        for out_name in ("jsonl", "parquet"):
            t_imp, t_scan, rss, rss_scan = _arms(log, os.path.join(tmp, f"{engine}-all.{out_name}"), reps)
            lps, scan_lps = n / statistics.median(t_imp), n / statistics.median(t_scan)
            rows.append(Row(
                f"import a {n // 1000} k-line {engine} log of nothing but "
                f"{'SpecDecoding' if engine == 'vllm' else 'Decode batch'} lines to a "
                f"{'JSONL' if out_name == 'jsonl' else 'Parquet'} trace",
                f"{lps / 1e3:.0f} k lines/s ({rss:.0f} MiB)",
                f"{scan_lps / 1e3:.0f} k lines/s: a bare regex scan",
                f"{statistics.median(t_imp) / statistics.median(t_scan):.1f}x the scan's time",
                "≥ 100 k lines/s", "met" if lps >= 100e3 else "not met",
                f"{_spread(t_imp, n)} over {reps} runs, in-process time"))
    return rows


def bench_notebook(reps: int) -> list[Row]:
    """``specscope.open(parquet).steps()`` on a 1 M-step Parquet trace, beside pyarrow reading
    the same columns on its own (the floor: Arrow to pandas, no specscope in between)."""
    from .collector import _synthetic_verify_parquet

    tmp = tempfile.mkdtemp(prefix="specscope-nb-")
    n = 1_000_000
    _synthetic_verify_parquet(tmp, n, batch=1)
    ours, peer = [], []
    for _ in range(max(3, min(reps, 5))):
        t, rss = _timed(f"import specscope\ndf = specscope.open({tmp!r}).steps()\nassert len(df) == {n}")
        ours.append(t)
        t, _ = _timed("import pyarrow.dataset as ds\n"
                      f"df = ds.dataset({tmp!r} + '/verify', format='parquet', partitioning='hive')"
                      ".to_table().to_pandas()")
        peer.append(t)
    med, med_peer = statistics.median(ours), statistics.median(peer)
    return [Row("open a 1 M-step Parquet trace into a steps DataFrame (specscope.open(...).steps())",
                f"{med:.2f} s ({rss:.0f} MiB)", f"{med_peer:.2f} s: pyarrow reading every column of the dataset to pandas",
                f"{med / med_peer:.2f}x", "a few seconds", "met" if med <= 5 else "not met",
                f"{min(ours):.2f}-{max(ours):.2f} s, in-process time")]
