"""Offline replay: feed a trace through a Collector as if live, at recorded pace x speed or as
fast as possible, so /metrics and the dashboard show it exactly as they would a live run.

JSONL traces stream line by line in batches; Parquet verify entries go through the collector's
columnar path. Memory stays bounded by the batch size whatever the trace size.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from .. import schema
from ..io.trace import Trace, iter_jsonl
from ..schema import Problem


@dataclass
class ReplayStats:
    records: int = 0  #: records fed (a verify entry counts once in Parquet, a step in JSONL)
    entries: int = 0  #: verify request entries among them
    seconds: float = 0.0
    problems: int = 0


def _batches(paths: Sequence[str | os.PathLike], batch: int,
             problems: list[Problem], where: Any = None) -> Iterator[tuple[str, Any]]:
    for p in paths:
        p = Path(p)
        if p.is_dir() or p.suffix == ".parquet":
            from ..io.parquet import _files, iter_verify_columns, read_parquet

            store, files = _files(p, where)
            others = [r for f, _ in files if f[len(store.root):].strip("/").split("/")[0] != "verify"
                      for r in read_parquet(f)]
            runs = [r for r in others if isinstance(r, schema.RunRecord)]
            if runs:
                yield "records", runs
            for cols in iter_verify_columns(p, where):
                yield "columns", cols
            rest = [r for r in others if not isinstance(r, schema.RunRecord)]
            for i in range(0, len(rest), batch):
                yield "records", rest[i:i + batch]
            continue
        chunk: list[Any] = []
        for r in iter_jsonl(p, problems, Trace()):
            chunk.append(r)
            if len(chunk) >= batch:
                yield "records", chunk
                chunk = []
        if chunk:
            yield "records", chunk


def replay(paths: Sequence[str | os.PathLike], collector: Any, *, speed: float | None = None,
           batch: int = 4096, progress: bool = True,
           sleep: Callable[[float], None] = time.sleep, where: Any = None) -> ReplayStats:
    """Feed the traces into ``collector``; ``speed`` None means as fast as possible."""
    from tqdm import tqdm

    stats = ReplayStats()
    problems: list[Problem] = []
    bar = tqdm(unit="rec", unit_scale=True, desc="replay", disable=not progress)
    t_start = time.perf_counter()
    t0: int | None = None
    for kind, item in _batches(paths, batch, problems, where):
        if kind == "columns":
            collector.observe_columns(item)
            stats.records += len(item)
            stats.entries += len(item)
            bar.update(len(item))
            continue
        if speed is not None:
            for r in item:  # pace record by record at the recorded rate
                t = schema.time_ns(r, end=True)
                if t:
                    t0 = t if t0 is None else t0
                    ahead = (t - t0) / 1e9 / speed - (time.perf_counter() - t_start)
                    if ahead > 0:
                        sleep(ahead)
                collector.observe([r])
        else:
            collector.observe(item)
        stats.records += len(item)
        stats.entries += sum(len(getattr(r, "entries", ())) for r in item)
        bar.update(len(item))
    bar.close()
    stats.seconds = time.perf_counter() - t_start
    stats.problems = len(problems)
    return stats


def replay_sections(path: str | os.PathLike, where: Any = None,
                    max_windows: int = 240) -> list[tuple[str, str, Any]]:
    """A trace (a big Parquet store's, say) through the collector's column path, as report
    sections: ``(run id, node, Section)`` per label set (and node, where several), at most
    about ``max_windows`` windows each; no per-request figures."""
    from ..collector.service import Collector
    from ..collector.snapshot import snapshot_sections

    collector = Collector(window_s=1.0, num_windows=1_000_000, max_label_sets=256)
    replay([path], collector, progress=False, where=where)
    collector.tick()
    return snapshot_sections(collector.snapshot(), max_windows)
