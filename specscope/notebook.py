"""The notebook API: ``specscope.open(PATH, ...)`` and small analyses that return DataFrames.

One entry object over traces (JSONL or Parquet), sweep directories (a folder of JSONL traces)
and any file ``specscope import`` reads; its methods return pandas DataFrames, and
``report()``, ``compare()`` and ``categories()`` are the library calls the CLI makes. Frames are
built from columns (Arrow for Parquet traces, numpy arrays otherwise), never row by row.

    import specscope
    t = specscope.open("nightly.parquet")
    t.steps().groupby("run_id").num_accepted.mean()
    t.requests().sort_values("acceptance_length").head()
    specscope.open("fleet/", where="node=rack 3/gpu 5,since=2026-12-01").steps()
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any

from . import schema

STEP_COLUMNS = ["run_id", "config_id", "node", "rank", "step", "t_ns", "batch_size", "request_id",
                "num_drafted", "num_draft_tokens", "num_accepted", "mode_requested", "mode_used"]


def _pd():
    try:
        import pandas as pd
    except ImportError as exc:
        raise ModuleNotFoundError("the notebook API needs pandas: pip install 'specscope[notebook]'",
                                  name=exc.name) from None
    return pd


def _expand(paths: tuple[str | os.PathLike, ...], where: Any) -> list[tuple[Path, Any]]:
    """Each source with its selection: ``where`` and a path's own (after ``#``), merged."""
    from .io.trace import split_selection

    out: list[tuple[Path, Any]] = []
    for text, sel in map(split_selection, paths):
        sel = where.merge(sel) if where and sel else (sel or where)
        p = Path(text)
        if p.is_dir() and not any(p.rglob("*.parquet")):  # a sweep directory of JSONL traces
            out.extend((q, sel) for q in sorted(p.glob("*.jsonl")))
        else:
            out.append((p, sel))
    if not out:
        raise ValueError(f"nothing to open in {', '.join(map(str, paths))}")
    return out


def open(*paths: str | os.PathLike, where: Any = None) -> "Traces":  # noqa: A001 - the public name
    """Traces, sweep directories or importable files as one object (see ``Traces``).

    ``where`` selects as the fleet query does: an ``io.store.Where`` or its text
    (``node=gpu-07|gpu-08,since=2026-12-01``); a store reads only the partitions it admits, other
    sources keep the records it admits. A selection after ``#`` in a path adds to it."""
    from .io.store import Where

    sel = Where.parse(where) if isinstance(where, str) else where
    return Traces(_expand(paths, sel or None))


class Traces:
    """Records of one or more sources and the frames and analyses over them."""

    def __init__(self, sources: list[tuple[Path, Any]]) -> None:
        self.sources = sources  #: (path, its io.store.Where or None)
        self.paths = [p for p, _ in sources]
        self.problems: list[Any] = []

    @cached_property
    def records(self) -> list[Any]:
        from .importers import import_file
        from .io.trace import read_trace

        out: list[Any] = []
        for p, where in self.sources:
            if _is_trace(p):
                trace = read_trace(p, where)
                out.extend(trace.records)
                self.problems.extend(trace.problems)
            else:  # a log, benchmark output or per-request file: imported on the fly
                res = import_file(p)
                runs = {r.run_id: r for r in res.records if isinstance(r, schema.RunRecord)}
                out.extend(r for r in res.records if not where or where.admits_record(r, runs))
                self.problems.extend(res.problems)
        return out

    # ------------------------------------------------------------------ frames
    def steps(self) -> Any:
        """One row per verify entry (request-step): the columns of STEP_COLUMNS (``node`` the
        recording node's name, "" where unknown)."""
        pd = _pd()
        frames = [_parquet_steps(p, where) for p, where in self.sources if p.is_dir()]
        files = [(p, where) for p, where in self.sources if not p.is_dir()]
        source = self if len(files) == len(self.sources) else Traces(files) if files else None
        rest = [r for r in (source.records if source else []) if isinstance(r, schema.VerifyStepRecord)]
        if rest:
            frames.append(_record_steps(rest, pd))
        frames = [f for f in frames if f is not None and len(f)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=STEP_COLUMNS)

    def requests(self) -> Any:
        """One row per request: its speculative figures (acceptance length with the bonus
        token), flags and latencies; None/NaN where a source did not give a figure."""
        from .collector.requests import request_rows

        rows = request_rows(self.records)
        cols = {"run_id": [r.run_id for r in rows], "request_id": [r.request_id for r in rows],
                "category": [r.category for r in rows], "steps": [r.steps for r in rows],
                "drafted": [r.drafted for r in rows], "accepted": [r.accepted for r in rows],
                "acceptance_length": [r.acceptance_length for r in rows],
                "acceptance_rate": [r.acceptance_rate for r in rows],
                "output_tokens": [r.output_tokens for r in rows], "k": [r.k for r in rows],
                "e2e_s": [r.e2e_s for r in rows], "tpot_s": [r.tpot_s for r in rows],
                "flags": [",".join(f["flag"] for f in r.flags) for r in rows]}
        return _pd().DataFrame(cols)

    def windows(self, window_s: float | None = None) -> Any:
        """The report's windows (pooled counts per interval, or per imported interval)."""
        return _pd().DataFrame(self.report(window_s=window_s)["windows"])

    def phases(self) -> Any:
        """One row per phase timing: run_id, rank, step, phase, device, clock, start, duration."""
        ph = [r for r in self.records if isinstance(r, schema.PhaseRecord)]
        return _pd().DataFrame({
            "run_id": [r.run_id for r in ph], "rank": [r.rank for r in ph], "step": [r.step for r in ph],
            "phase": [r.phase for r in ph], "device": [r.device for r in ph],
            "clock": [r.clock for r in ph], "t_start_ns": [r.t_start_ns for r in ph],
            "duration_ms": [r.duration_ns / 1e6 for r in ph]})

    def categories(self, baseline: "Traces | None" = None) -> Any:
        """Per workload category; with a run without speculation of the same prompts, the
        speedup and its bootstrap interval (``report --by category --baseline``)."""
        from .collector.requests import cat_dict, category_rows

        rows = category_rows(self.records, baseline.records if baseline is not None else None)
        return _pd().DataFrame([cat_dict(c) for c in rows])

    def uptime(self) -> Any:
        """Acceptance by uptime between restarts (``report --by uptime``): one row per run,
        segment and span of uptime (hours), with the tokens served since the engine's start,
        drafts, draft tokens, accepted ones, acceptance rate and acceptance length (bonus token
        included)."""
        from .collector.uptime import uptime_dict, uptime_runs

        return _pd().DataFrame([{"run_id": d["run_id"], **span} for u in uptime_runs(self.records)
                                for d in (uptime_dict(u),) for span in d["spans"]])

    # ------------------------------------------------------------------ analyses
    def report(self, window_s: float | None = None) -> dict[str, Any]:
        """``specscope report --json``'s object."""
        from .collector.report import build_report

        return build_report(self.records, window_s=window_s, problems=self.problems)

    def explain(self, baseline: "Traces | None" = None, tpot_ms: float | None = None) -> dict[str, Any]:
        """``specscope explain --json``: the speedup decomposition of every speculative run
        against its reference run (or ``baseline``'s), and the verdicts as engine settings."""
        from .collector.explain import explain_all

        return explain_all(self.records, baseline.records if baseline is not None else None,
                           tpot_ms=tpot_ms)

    def compare(self, other: "Traces", n_boot: int = 1000) -> Any:
        """``specscope compare``: this source's first measured run against ``other``'s."""
        from .collector.compare import compare, run_sample

        a, b = _first_measured(self.records), _first_measured(other.records)
        return _pd().DataFrame(compare(run_sample(self.records, a), run_sample(other.records, b),
                                       n_boot=n_boot))


def _is_trace(path: Path) -> bool:
    """Whether ``path`` is a specscope trace (Parquet dataset, or JSONL with its header)."""
    from .io.trace import sniff

    if sniff(path) == "parquet":
        return True
    with path.open(encoding="utf-8", errors="replace") as f:
        first = f.readline()
    return '"kind"' in first and '"header"' in first


def _first_measured(records: list[schema.Record]) -> str:
    runs = [r.run_id for r in records if isinstance(r, schema.RunRecord)
            and r.labels.get("role") != "reference"]
    if not runs:
        raise ValueError("no measured run")
    return runs[0]


def _parquet_steps(path: Path, where: Any = None) -> Any:
    """Verify entries of a Parquet trace straight from Arrow (partition columns restored), the
    partitions ``where`` admits only."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .io.store import UNKNOWN, open_store

    dataset = open_store(path).dataset("verify")
    if dataset is None:
        return None
    table = dataset.to_table(columns=STEP_COLUMNS, filter=where.expression() if where else None)
    node = pc.fill_null(table.column("node"), UNKNOWN)
    node = pc.if_else(pc.equal(node, UNKNOWN), pa.scalar(""), node)
    table = table.set_column(STEP_COLUMNS.index("node"), "node", pc.dictionary_encode(node))
    return table.to_pandas()


def _record_steps(records: list[schema.VerifyStepRecord], pd: Any) -> Any:
    from .io.columns import VerifyColumns

    frames = []
    for c in VerifyColumns.from_records(records, detail=True):
        names = list(c.mode_names)
        assert c.request_ids is not None  # detail=True
        frames.append(pd.DataFrame({
            "run_id": c.run_id, "config_id": c.config_id, "node": pd.Categorical([c.node] * len(c)),
            "rank": c.rank, "step": c.step,
            "t_ns": c.t_ns, "batch_size": c.batch_size, "request_id": c.request_ids.tolist(),
            "num_drafted": c.num_drafted, "num_draft_tokens": c.num_draft_tokens,
            "num_accepted": c.num_accepted,
            "mode_requested": pd.Categorical.from_codes(c.mode_requested, names),
            "mode_used": pd.Categorical.from_codes(c.mode_used, names)}))
    return pd.concat(frames, ignore_index=True) if frames else None
