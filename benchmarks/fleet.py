"""A fleet's store: 100 M verify entries over 16 nodes, per-configuration and per-node
aggregates on DuckDB against today's column loader (the collector's replay, as the dashboard
aggregates a big trace) and on a Spark cluster (a master and two workers on this machine)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from .common import Row, _child

NODES = 16
DAYS = 4
ENTRIES = 100_000_000


def _write_store(root: str, n: int = ENTRIES, nodes: int = NODES, days: int = DAYS) -> int:
    """``n`` verify entries in the fleet layout: 16 nodes, two configurations (even and odd
    nodes), four days, one part per node and day; the full verify schema, as a recorder writes
    it. Returns the parts written."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specscope import schema
    from specscope.io.store import ROW_GROUP, partition_path

    meta = {b"specscope_schema_version": str(schema.SCHEMA_VERSION).encode(), b"specscope_kind": b"verify"}
    per = n // (nodes * days)
    rng = np.random.default_rng(0)
    parts = 0
    for node in range(nodes):
        config = f"eagle-s{3 + node % 2}-k1"
        depth = 3 + node % 2
        for day in range(days):
            m = per if (node, day) != (nodes - 1, days - 1) else n - per * (nodes * days - 1)
            acc = np.minimum(rng.geometric(0.40 + 0.01 * node, m) - 1, depth)
            steps = np.arange(m) // 64
            t0 = (1_764_806_400 + day * 86_400) * 10**9
            empty = pa.array([[]] * m, type=pa.list_(pa.int64()))
            table = pa.table({
                "run_id": pa.array([f"nightly-{config}"] * m), "config_id": pa.array([config] * m),
                "rank": np.zeros(m, np.int64), "step": steps, "t_ns": t0 + steps * 20_000_000,
                "batch_size": np.full(m, 64), "draft_depth": np.full(m, depth),
                "depth_reason": pa.array([""] * m), "record_seq": steps,
                "request_id": pa.array([f"r{node}"] * m), "num_drafted": np.full(m, depth),
                "num_draft_tokens": np.full(m, depth), "num_accepted": acc, "accepted_per_pos": empty,
                "temperature": np.full(m, 0.7), "top_p": np.ones(m), "top_k": np.zeros(m, np.int64),
                "mode_requested": pa.array(["speculative-sampling"] * m),
                "mode_used": pa.array(["speculative-sampling"] * m),
                "num_verified": acc + 1, "num_top1": acc, "expected_top1": rng.random(m),
                "var_top1": rng.random(m), "draft_top1_hist": empty}).replace_schema_metadata(meta)
            day_s = time.strftime("%Y-%m-%d", time.gmtime(t0 / 1e9))
            folder = os.path.join(root, partition_path("verify", day_s, config, f"nightly-{config}",
                                                       f"gpu-{node:02d}"))
            os.makedirs(folder, exist_ok=True)
            pq.write_table(table, os.path.join(folder, f"part-{node}-{day}.parquet"),
                           compression="zstd", row_group_size=ROW_GROUP)
            parts += 1
    return parts


DUCK = """
import time, json
t = time.perf_counter()
from specscope.fleet import fleet_figures
by_node = fleet_figures({root!r}, ("config", "node"))
by_config = fleet_figures({root!r}, ("config",))
print(json.dumps({{"s": time.perf_counter() - t, "entries": sum(f.request_steps for f in by_config),
                   "config": [f.to_dict() for f in by_config], "node": [f.to_dict() for f in by_node]}}))
"""

LOADER = """
import time, json
t = time.perf_counter()
from specscope.collector.service import Collector
from specscope.exporters.replay import replay
c = Collector(num_windows=10, max_label_sets=256)
replay([{root!r}], c, progress=False)
snap = c.snapshot()
print(json.dumps({{"s": time.perf_counter() - t, "label_sets": len(snap.totals),
                   "accepted": sum(s.accepted_tokens for s in snap.totals.values())}}))
"""

SPARK = """
import time, json
from specscope.fleet import fleet_figures
from specscope.fleet import spark as sp
from tests.fleet.cluster import LocalCluster  # run from the repository root, as make bench does
t = time.perf_counter()
with LocalCluster(workers=2, memory="2g") as cluster:
    session = sp.session(cluster.master, conf={{"spark.executor.memory": "2g"}})
    up = time.perf_counter() - t
    t = time.perf_counter()
    by_node = fleet_figures({root!r}, ("config", "node"), engine="spark", spark=session)
    by_config = fleet_figures({root!r}, ("config",), engine="spark", spark=session)
    q = time.perf_counter() - t
    session.stop()
print(json.dumps({{"s": q, "up": up, "config": [f.to_dict() for f in by_config],
                   "node": [f.to_dict() for f in by_node]}}))
"""


def bench_fleet(reps: int) -> list[Row]:
    import json

    tmp = tempfile.mkdtemp(prefix="specscope-fleet-")
    root = os.path.join(tmp, "store")
    try:
        t = time.perf_counter()
        parts = _write_store(root)
        t_write = time.perf_counter() - t
        duck = [_child(DUCK.format(root=root)) for _ in range(max(3, reps))]
        d = [json.loads(out) for _, _, out in duck]
        d_s = sorted(x["s"] for x in d)
        d_rss = max(rss for _, rss, _ in duck)
        t_load, rss_load, out = _child(LOADER.format(root=root))
        loader = json.loads(out)
        rows = [Row(f"fleet store: {d[0]['entries'] / 1e6:.0f} M verify entries over {NODES} nodes "
                    f"({parts} parts, 2 configurations, {DAYS} days): per-configuration and per-node "
                    "aggregates (drafted, accepted, per position, acceptance length) on DuckDB, "
                    "wall time (peak RSS)", f"{d_s[len(d_s) // 2]:.2f} s ({d_rss:.0f} MiB)",
                    f"{loader['s']:.1f} s ({rss_load:.0f} MiB): today's column loader (the "
                    "collector's replay, per configuration and node)",
                    f"{loader['s'] / d_s[len(d_s) // 2]:.0f}x faster, "
                    f"{rss_load / d_rss:.1f}x less memory", "≤ 5 s",
                    "met" if d_s[len(d_s) // 2] <= 5 else "not met",
                    f"DuckDB {d_s[0]:.2f}-{d_s[-1]:.2f} s over {len(d_s)} runs; loader single run; "
                    f"store written in {t_write:.0f} s")]
        assert loader["accepted"] == sum(f["accepted_tokens"] for f in d[0]["config"])
        try:
            t_sp, rss_sp, out = _child(SPARK.format(root=root))
        except RuntimeError as exc:  # no Java here: say so, never a made-up figure
            rows.append(Row("fleet store, same aggregates on a Spark cluster", "n/a", "—", "—",
                            "(reported)", "—", f"not run: {str(exc)[-120:]}"))
            return rows
        s = json.loads(out)
        same = s["config"] == d[0]["config"] and s["node"] == d[0]["node"]
        rows.append(Row("fleet store, the same aggregates on a Spark standalone cluster (a master "
                        "and two workers of one core each, on this machine), query wall time; "
                        "figures equal to DuckDB's", f"{s['s']:.1f} s (cluster and session up in "
                        f"{s['up']:.0f} s)", f"{d_s[len(d_s) // 2]:.2f} s on DuckDB",
                        f"{s['s'] / d_s[len(d_s) // 2]:.1f}x DuckDB's time",
                        "equal figures", "met" if same else "not met",
                        f"single run; driver peak RSS {rss_sp:.0f} MiB (the JVMs apart)"))
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
