"""Collector, exporter and importer benchmarks."""

from __future__ import annotations

import os
import statistics

from specscope import schema

from .common import Row, _child, _interleaved, _spread, _timeit


def _synthetic_columns(n: int, seed: int = 0):
    import numpy as np

    from specscope.collector.columns import VerifyColumns

    rng = np.random.default_rng(seed)
    acc = np.minimum(rng.geometric(0.45, n) - 1, 4)
    return VerifyColumns(
        run_id="bench", config_id="bench", rank=0, num_steps=n // 64,
        t_ns=np.sort(rng.integers(0, 10**10, n)), num_drafted=np.full(n, 4),
        num_draft_tokens=np.full(n, 4), num_accepted=acc,
        mode_requested=np.full(n, 2, dtype=np.int8), mode_used=np.full(n, 2, dtype=np.int8),
        num_verified=acc + 1, num_top1=acc, expected_top1=rng.random(n) * 3,
        var_top1=rng.random(n), draft_hist=np.zeros((n, schema.DRAFT_HIST_BINS), dtype=np.int64))


def bench_collector(reps: int) -> list[Row]:
    """Collector ingest vs a naive prometheus_client loop; /metrics render vs generate_latest."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from specscope.collector.service import Collector
    from specscope.exporters.prometheus import render

    rows = []
    cols = _synthetic_columns(1 << 21)
    n = len(cols)
    batch = 1 << 16
    import numpy as np

    batches = [cols.select(np.arange(n) // batch == i) for i in range(n // batch)]
    run = schema.RunRecord(run_id="bench", config_id="bench", algorithm="eagle", num_steps=4,
                           topk=1, num_verify_tokens=5, backend="cpu", model="m")

    def ours():
        c = Collector()
        c.observe([run])
        for b in batches:
            c.observe_columns(b)

    reg = CollectorRegistry()
    # the exporter's own label set, so both sides do the same work per entry
    lab = ("algorithm", "num_steps", "topk", "num_draft_tokens", "backend", "model", "rank")
    lv = ("eagle", "4", "1", "5", "cpu", "m", "0")
    drafted = Counter("naive_draft_tokens", "", lab, registry=reg)
    accepted = Counter("naive_accepted_tokens", "", lab, registry=reg)
    per_pos = Counter("naive_accepted_per_position", "", lab + ("position",), registry=reg)
    steps = Counter("naive_request_steps", "", lab + ("mode",), registry=reg)
    al = Histogram("naive_accept_length", "", lab, buckets=(1, 2, 3, 4, 5), registry=reg)
    naive_n = 40_000
    acc_list = cols.num_accepted[:naive_n].tolist()

    def naive():
        for a in acc_list:
            drafted.labels(*lv).inc(4)
            accepted.labels(*lv).inc(a)
            for p in range(a):
                per_pos.labels(*lv, str(p)).inc()
            steps.labels(*lv, "speculative-sampling").inc()
            al.labels(*lv).observe(a + 1)

    t = _interleaved({"ours": ours, "naive": naive}, max(3, reps // 2))
    ours_rate = n / statistics.median(t["ours"])
    naive_rate = naive_n / statistics.median(t["naive"])
    rows.append(Row("collector ingest, verify-step request entries/s (columnar batches of 65,536) "
                    "vs per-entry prometheus_client inc()/observe()",
                    f"{ours_rate / 1e6:.1f} M/s", f"{naive_rate / 1e3:.0f} k/s",
                    f"{ours_rate / naive_rate:.0f}x", "≥ 2 M/s and ≥ 50x",
                    "met" if ours_rate >= 2e6 and ours_rate / naive_rate >= 50 else "not met",
                    f"{_spread(t['ours'])} / {_spread(t['naive'])}"))

    records = [schema.VerifyStepRecord(
        run_id="bench", config_id="bench", rank=0, step=i, t_ns=i, batch_size=64,
        entries=tuple(schema.VerifyEntry(request_id=f"r{j}", num_drafted=4, num_draft_tokens=4,
                                         num_accepted=int(cols.num_accepted[i * 64 + j]),
                                         accepted_per_pos=(), temperature=0.7)
                      for j in range(64))) for i in range(500)]
    tr = _timeit(lambda: Collector().observe(records), max(3, reps // 2))
    rec_rate = 500 * 64 / statistics.median(tr)
    rows.append(Row("collector ingest from record objects (JSON/trace path), entries/s",
                    f"{rec_rate / 1e3:.0f} k/s", f"{naive_rate / 1e3:.0f} k/s",
                    f"{rec_rate / naive_rate:.1f}x", "(reported)", "—", _spread(tr)))

    # /metrics: 20 configurations x 8 positions x 8 histograms
    big = Collector(max_label_sets=64)
    for cfg in range(20):
        r = schema.RunRecord(run_id=f"r{cfg}", config_id=f"c{cfg}", algorithm="eagle",
                             num_steps=8, topk=1, num_verify_tokens=9, backend="cuda", model=f"m{cfg}")
        big.observe([r])
        c8 = _synthetic_columns(4096, seed=cfg)
        c8.run_id = f"r{cfg}"
        c8.num_drafted = np.full(len(c8), 8)
        c8.num_accepted = np.minimum(c8.num_accepted * 2, 8)
        c8.draft_hist[:, 5] = 1
        big.observe_columns(c8)
        stats = big._totals[big._key(f"r{cfg}", 0)]
        for name in ("ttft_s", "tpot_s", "itl_token_s", "itl_chunk_s", "e2e_s", "phase:draft"):
            stats._hist(name).observe(0.01 * (cfg + 1))
    snap = big.snapshot()
    text = render(snap)
    n_lines = text.count("\n")
    reg2 = CollectorRegistry()
    labels = ("algorithm", "num_steps", "topk", "num_draft_tokens", "backend", "model", "rank")
    counters = [Counter(f"peer_c{i}", "", labels, registry=reg2) for i in range(12)]
    pos_counters = [Counter(f"peer_pos{i}", "", labels + ("position",), registry=reg2) for i in range(2)]
    hists = [Histogram(f"peer_h{i}", "", labels, registry=reg2,
                       buckets=tuple(range(1, 19))) for i in range(8)]
    for cfg in range(20):
        lv = ("eagle", "8", "1", "9", "cuda", f"m{cfg}", "0")
        for c in counters:
            c.labels(*lv).inc()
        for c in pos_counters:
            for p in range(8):
                c.labels(*lv, str(p)).inc()
        for h in hists:
            h.labels(*lv).observe(1)
    peer_lines = generate_latest(reg2).decode().count("\n")
    tm = _interleaved({"ours": lambda: render(big.snapshot()), "peer": lambda: generate_latest(reg2)},
                      reps)
    m_ours, m_peer = statistics.median(tm["ours"]), statistics.median(tm["peer"])
    rows.append(Row(f"/metrics render (snapshot + text), 20 configs x 8 positions x 8 histograms "
                    f"({n_lines} lines; peer {peer_lines} lines)", f"{m_ours * 1e3:.1f} ms",
                    f"{m_peer * 1e3:.1f} ms (generate_latest)", f"{m_peer / m_ours:.1f}x faster",
                    "≤ 20 ms", "met" if m_ours <= 0.020 else "not met",
                    f"{_spread(tm['ours'])} / {_spread(tm['peer'])}"))

    # Prometheus text back in: the one parser vs prometheus_client's, on that same page
    from prometheus_client.parser import text_string_to_metric_families

    from specscope.io import promtext

    page = render(big.snapshot())
    parser = promtext.Parser()
    tp = _interleaved({"ours": lambda: parser.parse(page),
                       "peer": lambda: list(text_string_to_metric_families(page))}, reps)
    us_ours = statistics.median(tp["ours"]) / n_lines * 1e6
    us_peer = statistics.median(tp["peer"]) / n_lines * 1e6
    rows.append(Row(f"Prometheus text parsing, µs per line ({n_lines}-line /metrics page, label "
                    "sets seen before, as on every scrape after the first) vs prometheus_client",
                    f"{us_ours:.2f} µs", f"{us_peer:.1f} µs", f"{us_peer / us_ours:.1f}x faster",
                    "≤ 2 µs", "met" if us_ours <= 2.0 else "not met",
                    f"{_spread(tp['ours'])} / {_spread(tp['peer'])}"))
    return rows


def _synthetic_verify_parquet(out: str, n: int, chunk: int = 1 << 20, batch: int = 64,
                              step_ns: int = 1000) -> None:
    """A Parquet trace dataset with ``n`` verify entries (one run, ``batch`` per step, a step
    every ``step_ns``), written in chunks."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = os.path.join(out, "verify", "config=bench", "run=bench")
    os.makedirs(folder, exist_ok=True)
    meta = {b"specscope_schema_version": str(schema.SCHEMA_VERSION).encode(), b"specscope_kind": b"verify"}
    rng = np.random.default_rng(0)
    for part, start in enumerate(range(0, n, chunk)):
        m = min(chunk, n - start)
        acc = np.minimum(rng.geometric(0.45, m) - 1, 4)
        hist = pa.array([[]] * m, type=pa.list_(pa.int64()))
        table = pa.table({
            "run_id": pa.array(["bench"] * m), "config_id": pa.array(["bench"] * m),
            "rank": np.zeros(m, np.int64), "step": (start + np.arange(m)) // batch,
            "t_ns": 10**18 + (start + np.arange(m)) // batch * step_ns,
            "batch_size": np.full(m, batch),
            "request_id": pa.array(["r"] * m), "num_drafted": np.full(m, 4),
            "num_draft_tokens": np.full(m, 4), "num_accepted": acc,
            "accepted_per_pos": pa.array([[]] * m, type=pa.list_(pa.int64())),
            "temperature": np.full(m, 0.7), "top_p": np.ones(m), "top_k": np.zeros(m, np.int64),
            "mode_requested": pa.array(["speculative-sampling"] * m),
            "mode_used": pa.array(["speculative-sampling"] * m),
            "num_verified": acc + 1, "num_top1": acc, "expected_top1": rng.random(m),
            "var_top1": rng.random(m), "draft_top1_hist": hist}).replace_schema_metadata(meta)
        pq.write_table(table, os.path.join(folder, f"part-{part}.parquet"), row_group_size=1 << 15)


def bench_import(reps: int) -> list[Row]:
    """Replay and aggregation of a 10M-entry Parquet trace (log import: benchmarks.imports)."""
    import tempfile

    rows = []
    tmp = tempfile.mkdtemp(prefix="specscope-bench-")
    pq_dir = os.path.join(tmp, "pq")
    n = 10_000_000
    _synthetic_verify_parquet(pq_dir, n)
    t_rep, rss_rep, out = _child(
        "from specscope.collector.service import Collector\n"
        "from specscope.exporters.replay import replay\n"
        f"s = replay([{pq_dir!r}], Collector(), progress=False)\nprint(s.records)")
    rows.append(Row("replay a 10M-entry Parquet trace at --speed max through the collector: "
                    "records/s (peak RSS)", f"{int(out) / t_rep / 1e6:.1f} M records/s ({rss_rep:.0f} MiB)",
                    "—", "—", "RSS ≤ 300 MB", "met" if rss_rep <= 300 else "not met",
                    "single run, includes interpreter start"))
    t_agg, _, out = _child(
        "from specscope.collector.service import Collector\n"
        "from specscope.exporters.replay import replay\n"
        "from specscope.collector.report import spec_figures\n"
        f"c = Collector(); replay([{pq_dir!r}], c, progress=False)\n"
        "snap = c.snapshot()\n"
        "print(sorted(spec_figures(s)['mean_acceptance_length'] for s in snap.totals.values()))")
    rows.append(Row("10M-entry Parquet trace to the aggregates the dashboard shows (totals, "
                    "windows, detectors), wall time", f"{t_agg:.2f} s", "—", "—", "≤ 5 s",
                    "met" if t_agg <= 5 else "not met", "single run, includes interpreter start"))
    jsonl = os.path.join(tmp, "imp.jsonl")
    t_j, rss_j, out = _child(
        "from specscope.collector.service import Collector\n"
        "from specscope.exporters.replay import replay\n"
        f"s = replay([{jsonl!r}], Collector(), progress=False)\nprint(s.records)")
    rows.append(Row("replay of the imported JSONL trace (record objects, not columnar): records/s",
                    f"{int(out) / t_j / 1e3:.0f} k records/s ({rss_j:.0f} MiB)", "—", "—",
                    "(reported)", "—", "single run"))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return rows
