"""A fleet's trace store: Parquet parts that many writers add to without coordinating.

Layout (hive partitions, one dataset per record kind)::

    ROOT/verify/date=2026-12-04/config=C/run=R/node=N/part-<time>-<node>-<pid>-<uuid>.parquet

- ``date`` is the UTC day of the part's records (their own times; the write time where a
  record has none), ``config``, ``run`` and ``node`` path-safe copies of ``config_id``,
  ``run_id`` and ``node``. The node lives in the path only (a data column of the same name
  would clash with the partition in Spark); readers restore it from there.
- Part names hold the write time, the node, the process id and a random suffix: writers on
  any number of hosts never pick the same name, and nobody lists a folder to choose one.
- A local part is written under a dot-name and renamed when complete (a reader or a writer
  killed mid-way never sees half a file); an object store's put is atomic on its own.
- ROOT is a local path or any filesystem URI pyarrow opens (``s3://``, ``gs://``, ``hdfs://``)
  or fsspec does (``memory://``, ``abfs://``, ...): one code path, the filesystem resolved here.

Stdlib plus pyarrow (lazily). Filters on date, configuration, run and node prune folders before
any file is opened.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

PARTITIONS = ("date", "config", "run", "node")
ROW_GROUP = 1 << 15  #: rows per row group: what a reader holds in memory at once
_TIME_FIELDS = ("t_ns", "t_start_ns", "t_finish_ns", "t_arrival_ns", "started_ns")


def safe(value: Any) -> str:
    """A path-safe copy of a partition value ("" becomes "_")."""
    text = str(value or "_")
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:120] or "_"


def day(t_ns: int | None) -> str:
    """The UTC date of a time in ns since the epoch (today where the time is unknown)."""
    t = t_ns if t_ns and t_ns > 0 else time.time_ns()
    return _dt.datetime.fromtimestamp(t / 1e9, tz=_dt.timezone.utc).strftime("%Y-%m-%d")


def row_time(row: dict[str, Any]) -> int | None:
    """A record row's own time: the first of its time fields that is set."""
    for f in _TIME_FIELDS:
        v = row.get(f)
        if v:
            return int(v)
    return None


@dataclass(frozen=True)
class Where:
    """Which partitions a query reads: a date range (inclusive, ``YYYY-MM-DD``) and any of
    configurations, runs, nodes (raw ids or their path-safe copies). Empty = no limit."""

    since: str | None = None
    until: str | None = None
    configs: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.since or self.until or self.configs or self.runs or self.nodes)

    @classmethod
    def parse(cls, text: str) -> "Where":
        """``node=n3,since=2026-12-01,config=a|b`` (the selection after ``#`` in a trace path)."""
        kw: dict[str, Any] = {}
        for item in filter(None, (x.strip() for x in text.split(","))):
            key, eq, value = item.partition("=")
            if not eq or key not in ("since", "until", "config", "run", "node", "date"):
                raise ValueError(f"selection {item!r}: expected since=, until=, date=, config=, "
                                 "run= or node= (values of one key joined by |)")
            if key in ("since", "until", "date"):
                check_date(value)
                if key == "date":
                    kw["since"] = kw["until"] = value
                else:
                    kw[key] = value
            else:
                kw[key + "s"] = tuple(kw.get(key + "s", ())) + tuple(value.split("|"))
        return cls(**kw)

    def merge(self, other: "Where") -> "Where":
        """Both selections at once: the narrower date range, and per list the values both
        name (one side's list where the other names none)."""
        def both(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
            if not a or not b:
                return a or b
            keep = tuple(v for v in b if safe(v) in {safe(x) for x in a})
            return keep or ("\0none",)  # nothing in common: admits nothing

        return Where(since=max(filter(None, (self.since, other.since)), default=None),
                     until=min(filter(None, (self.until, other.until)), default=None),
                     configs=both(self.configs, other.configs), runs=both(self.runs, other.runs),
                     nodes=both(self.nodes, other.nodes))

    def admits_record(self, r: Any, runs: dict[str, Any]) -> bool:
        """The same selection over a record (JSONL traces): its node, run, configuration (a
        record without one of its own takes its run's) and the UTC day of its time."""
        run = getattr(r, "run_id", "")
        rr = runs.get(run)
        node = getattr(r, "node", None)
        parts = {"run": safe(run), "node": safe(node if node is not None else getattr(rr, "node", "")),
                 "config": safe(getattr(r, "config_id", None) or getattr(rr, "config_id", ""))}
        t = row_time({f: getattr(r, f, None) for f in _TIME_FIELDS})
        if t:
            parts["date"] = day(t)
        elif self.since or self.until:
            return True  # a record with no time of its own (an eval) follows its run
        return self.admits(parts)

    def admits(self, parts: dict[str, str]) -> bool:
        """Whether a part with these partition values passes (a value the path lacks passes
        the filters on it only where there is none)."""
        d = parts.get("date")
        if (self.since or self.until) and d is None:
            return False
        if self.since and d < self.since:
            return False
        if self.until and d > self.until:
            return False
        for name, wanted in (("config", self.configs), ("run", self.runs), ("node", self.nodes)):
            if wanted and parts.get(name) not in {safe(w) for w in wanted}:
                return False
        return True


def check_date(value: str) -> None:
    """A ValueError naming ``value`` unless it is a date (YYYY-MM-DD)."""
    try:
        _dt.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a date (YYYY-MM-DD)") from None


def partition_values(path: str) -> dict[str, str]:
    """``{"date": ..., "node": ...}`` from a part's path (hive ``key=value`` folders)."""
    out = {}
    for seg in path.replace("\\", "/").split("/"):
        key, eq, value = seg.partition("=")
        if eq and key in PARTITIONS:
            out[key] = value
    return out


def partition_path(kind: str, date: str, config: str, run: str, node: str) -> str:
    return "/".join((kind, f"date={date}", f"config={safe(config)}", f"run={safe(run)}",
                     f"node={safe(node)}"))


def part_name() -> str:
    """A name no other writer picks: write time, node, process id and a random suffix."""
    from ..schema import default_node

    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    return f"part-{stamp}-{safe(default_node())}-{os.getpid()}-{uuid.uuid4().hex[:12]}.parquet"


@dataclass
class Store:
    """A store root on its filesystem."""

    uri: str
    fs: Any  #: a pyarrow.fs.FileSystem
    root: str  #: the root path on ``fs``
    local: bool
    _dirs: set[str] = field(default_factory=set)

    def join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/")] + [p.strip("/") for p in parts if p])

    def write(self, rel_dir: str, table: Any) -> str:
        """Write one part under ``rel_dir``; returns its path on the filesystem."""
        import pyarrow.parquet as pq

        folder = self.join(rel_dir)
        if folder not in self._dirs:
            self.fs.create_dir(folder, recursive=True)
            self._dirs.add(folder)
        name = part_name()
        final = f"{folder}/{name}"
        if not self.local:  # an object store's put is all or nothing
            pq.write_table(table, final, filesystem=self.fs, compression="zstd",
                           row_group_size=ROW_GROUP)
            return final
        tmp = f"{folder}/.{name}.tmp"
        pq.write_table(table, tmp, filesystem=self.fs, compression="zstd", row_group_size=ROW_GROUP)
        self.fs.move(tmp, final)
        return final

    def files(self, kind: str | None = None, where: Where | None = None) -> list[str]:
        """Every part (of one kind), pruned by ``where`` on the folder names, sorted."""
        from pyarrow.fs import FileSelector, FileType

        base = self.join(kind) if kind else self.root
        try:
            infos = self.fs.get_file_info(FileSelector(base, recursive=True, allow_not_found=True))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for info in infos:
            name = info.path.rsplit("/", 1)[-1]
            if info.type != FileType.File or not name.endswith(".parquet") or name.startswith("."):
                continue
            if where and not where.admits(partition_values(info.path[len(self.root):])):
                continue
            out.append(info.path)
        return sorted(out)

    def kinds(self) -> list[str]:
        from pyarrow.fs import FileSelector, FileType

        infos = self.fs.get_file_info(FileSelector(self.root, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == FileType.Directory
                      and not i.base_name.startswith("."))


def open_store(uri: str | os.PathLike, *, create: bool = False) -> Store:
    """The store at a local path or filesystem URI (pyarrow's filesystems first, then fsspec's)."""
    from pyarrow import fs as pafs

    text = os.fspath(uri)
    if "://" not in text or text.startswith("file://"):
        path = os.path.abspath(text[7:] if text.startswith("file://") else text)
        if create:
            os.makedirs(path, exist_ok=True)
        return Store(text, pafs.LocalFileSystem(), path.replace(os.sep, "/"), True)
    try:
        filesystem, path = pafs.FileSystem.from_uri(text)
    except (ValueError, OSError):  # pyarrow knows no such scheme: fsspec's filesystems
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        fs, path = fsspec.core.url_to_fs(text)
        filesystem = PyFileSystem(FSSpecHandler(fs))
    if create:
        filesystem.create_dir(path, recursive=True)
    return Store(text, filesystem, path.rstrip("/") or "/", False)


def verify_entries(p: str | os.PathLike, where: Where | None = None) -> int:
    """Verify entries of a Parquet trace directory (a store's selected partitions, or a
    compacted trace's files), from the files' footers; 0 for anything else."""
    from pathlib import Path

    p = Path(p)
    if not p.is_dir():
        return 0
    import pyarrow.parquet as pq

    store = open_store(p)
    return sum(pq.ParquetFile(store.fs.open_input_file(f)).metadata.num_rows
               for f in store.files("verify", where)) or sum(
        pq.ParquetFile(f).metadata.num_rows for f in p.glob("*.parquet"))


def compact_store(store: Store, *, kinds: Iterable[str] | None = None, where: Where | None = None,
                  min_parts: int = 2) -> dict[str, int]:
    """Merge each partition's parts into one (only partitions with ``min_parts`` or more).

    The merged part is written (and renamed into place) before the parts it replaces are
    deleted; a crash between the two leaves both, which a later compact merges again only
    after a reader could have counted rows twice, so compact while no report reads the store.
    Returns counts: partitions merged, parts read, parts written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    counts = {"partitions": 0, "parts_read": 0, "parts_written": 0}
    for kind in kinds or store.kinds():
        by_folder: dict[str, list[str]] = {}
        for f in store.files(kind, where):
            by_folder.setdefault(f.rsplit("/", 1)[0], []).append(f)
        for folder, files in sorted(by_folder.items()):
            if len(files) < min_parts:
                continue
            tables = [pq.read_table(f, filesystem=store.fs, partitioning=None) for f in files]
            meta = tables[-1].schema.metadata
            merged = pa.concat_tables([t.replace_schema_metadata(None) for t in tables],
                                      promote_options="permissive").replace_schema_metadata(meta)
            store.write(folder[len(store.root):], merged)
            for f in files:
                store.fs.delete_file(f)
            counts["partitions"] += 1
            counts["parts_read"] += len(files)
            counts["parts_written"] += 1
    return counts
