"""A fleet's trace store: Parquet parts that many writers add to without coordinating.

Layout (hive partitions, one dataset per record kind)::

    ROOT/verify/date=2026-12-04/config=C/run=R/node=N/part-<time>-<node>-<pid>-<uuid>.parquet

- ``date`` is the UTC day of the part's records (their own times; the write time where a
  record has none), ``config`` and ``run`` path-safe copies of ``config_id`` and ``run_id``
  (which stay in the data unchanged), ``node`` the node name itself, percent-encoded as hive
  partitioning does (``encode_node``), "_" where unknown. The node lives in the path only (a
  data column of the same name would clash with the partition in Spark); pyarrow, DuckDB and
  Spark decode it back to the name. Stores written before the encoding hold sanitised node
  names (``safe``), which hold no ``%`` and so read back as the sanitised name they are.
- Part names hold the write time, the node, the process id and a random suffix: writers on
  any number of hosts never pick the same name, and nobody lists a folder to choose one.
- A local part is written under a dot-name and renamed when complete (a reader or a writer
  killed mid-way never sees half a file); an object store's put is atomic on its own.
- ROOT is a local path or any filesystem URI pyarrow opens (``s3://``, ``gs://``, ``hdfs://``)
  or fsspec does (``memory://``, ``abfs://``, ...): one code path, the filesystem resolved here.

The layout (partition keys, their order, the glob) is written here once; the Parquet reader
and writer, DuckDB and Spark all take it from here. Every read goes through
``pyarrow.dataset`` with hive partitioning and one filter expression built from a ``Where``
(``Store.parts``): the dataset prunes partitions before any file is opened.

Stdlib plus pyarrow (lazily).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from .. import schema

PARTITIONS = ("date", "config", "run", "node")  #: the hive partition keys, outermost first
UNKNOWN = "_"  #: a partition value that is not known (a record without a node or configuration)
ROW_GROUP = 1 << 15  #: rows per row group: what a reader holds in memory at once


def safe(value: Any) -> str:
    """A path-safe copy of a partition value ("" becomes "_")."""
    text = str(value or "_")
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:120] or "_"


#: ASCII a node's partition value keeps as it is; every other ASCII character is written as
#: %XX. Non-ASCII stays as it is (UTF-8 on the filesystem): Spark decodes %XX one byte to one
#: character, so percent-encoded UTF-8 would come back garbled there.
_NODE_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
_MAX_SEGMENT = 200  #: bytes of an encoded partition value (filesystems allow 255 per folder)


def encode_node(node: str) -> str:
    """A node name as its partition value, reversibly: ``rack 3/gpu 5`` -> ``rack%203%2Fgpu%205``
    (pyarrow, DuckDB and Spark decode it on reading). "" is "_"; a name whose encoding is longer
    than a folder name may be is stored sanitised and cut (``safe``), as stores used to."""
    if not node:
        return UNKNOWN
    out = "".join(c if c in _NODE_KEEP or ord(c) > 127 else f"%{ord(c):02X}" for c in node)
    return out if len(out.encode("utf-8")) <= _MAX_SEGMENT else safe(node)


def node_value(node: str) -> str:
    """What a reader sees in the (decoded) node partition for a node name: the name, "_" for ""."""
    return node or UNKNOWN


def day(t_ns: int | None) -> str:
    """The UTC date of a time in ns since the epoch (today where the time is unknown)."""
    t = t_ns if t_ns and t_ns > 0 else time.time_ns()
    return _dt.datetime.fromtimestamp(t / 1e9, tz=_dt.timezone.utc).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class Where:
    """Which partitions a query reads: a date range (inclusive, ``YYYY-MM-DD``) and any of
    configurations, runs (raw ids or their path-safe copies) and nodes (the names as recorded;
    a store written before node names were kept whole holds their sanitised copies, and is
    selected by those). Empty = no limit."""

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
        def both(a: tuple[str, ...], b: tuple[str, ...], key) -> tuple[str, ...]:
            if not a or not b:
                return a or b
            keep = tuple(v for v in b if key(v) in {key(x) for x in a})
            return keep or ("\0none",)  # nothing in common: admits nothing

        return Where(since=max(filter(None, (self.since, other.since)), default=None),
                     until=min(filter(None, (self.until, other.until)), default=None),
                     configs=both(self.configs, other.configs, safe),
                     runs=both(self.runs, other.runs, safe),
                     nodes=both(self.nodes, other.nodes, node_value))

    def values(self) -> dict[str, set[str]]:
        """Per partition key, the (decoded) partition values admitted; keys without a limit left out."""
        out = {}
        for name, wanted, key in (("config", self.configs, safe), ("run", self.runs, safe),
                                  ("node", self.nodes, node_value)):
            if wanted:
                out[name] = {key(w) for w in wanted}
        return out

    def expression(self, *, dates: bool = True) -> Any:
        """The selection as one ``pyarrow.dataset`` filter on the partition keys (None: all);
        ``dates=False`` leaves the date range out (a run's record is kept whatever its day)."""
        import pyarrow.dataset as ds

        cond = []
        if dates and self.since:
            cond.append(ds.field("date") >= self.since)
        if dates and self.until:
            cond.append(ds.field("date") <= self.until)
        for name, values in self.values().items():
            cond.append(ds.field(name).isin(sorted(values)))
        out = None
        for c in cond:
            out = c if out is None else out & c
        return out

    def admits_record(self, r: Any, runs: dict[str, Any]) -> bool:
        """The same selection over a record (JSONL traces): its node, run, configuration (a
        record without one of its own takes its run's) and the UTC day of its time."""
        run = getattr(r, "run_id", "")
        rr = runs.get(run)
        parts = {"run": safe(run), "node": node_value(schema.node_of(r, runs)),
                 "config": safe(getattr(r, "config_id", None) or getattr(rr, "config_id", ""))}
        t = schema.time_ns(r)  # (never a run's start: a run record follows its run)
        if t:
            parts["date"] = day(t)
        elif self.since or self.until:
            return True  # a record with no time of its own (an eval) follows its run
        return self.admits(parts)

    def admits(self, parts: dict[str, str]) -> bool:
        """Whether a part with these (decoded) partition values passes (a value the path lacks
        passes the filters on it only where there is none)."""
        d = parts.get("date")
        if (self.since or self.until) and d is None:
            return False
        if self.since and d is not None and d < self.since:
            return False
        if self.until and d is not None and d > self.until:
            return False
        for name, values in self.values().items():
            if parts.get(name) not in values:
                return False
        return True


def check_date(value: str) -> None:
    """A ValueError naming ``value`` unless it is a date (YYYY-MM-DD)."""
    try:
        _dt.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a date (YYYY-MM-DD)") from None


def partition_values(path: str) -> dict[str, str]:
    """``{"date": ..., "node": ...}`` from a part's path (hive ``key=value`` folders), decoded."""
    from urllib.parse import unquote

    out = {}
    for seg in path.replace("\\", "/").split("/"):
        key, eq, value = seg.partition("=")
        if eq and key in PARTITIONS:
            out[key] = unquote(value)
    return out


def partition_path(kind: str, date: str, config: str, run: str, node: str) -> str:
    """The folder of a part, relative to the root: ``kind/date=D/config=C/run=R/node=N``."""
    values = {"date": date, "config": safe(config), "run": safe(run), "node": encode_node(node)}
    return "/".join([kind] + [f"{k}={values[k]}" for k in PARTITIONS])


def layout_glob(kind: str = "verify") -> str:
    """The parts of one kind in the fleet layout, as a glob relative to the root (DuckDB's and
    Spark's source): ``verify/date=*/config=*/run=*/node=*/*.parquet``."""
    return "/".join([kind] + [f"{k}=*" for k in PARTITIONS] + ["*.parquet"])


def partitioning() -> Any:
    """The layout's hive partitioning for ``pyarrow.dataset``: every key a string, values
    percent-decoded; a trace written before the fleet layout lacks some keys (null there)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    return ds.HivePartitioning(pa.schema([(k, pa.string()) for k in PARTITIONS]),
                               segment_encoding="uri")


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

    def dataset(self, kind: str) -> Any:
        """The parts of one kind as a ``pyarrow.dataset`` (hive partitioning), None where none."""
        import pyarrow.dataset as ds
        from pyarrow.fs import FileType

        base = self.join(kind)
        if self.fs.get_file_info(base).type != FileType.Directory:
            return None
        return ds.dataset(base, format="parquet", filesystem=self.fs, partitioning=partitioning(),
                          exclude_invalid_files=False)

    def parts(self, kind: str | None = None, where: Where | None = None, *,
              dates: bool = True) -> list[tuple[str, dict[str, str]]]:
        """Every part (of one kind) the selection admits, with its decoded partition values,
        sorted by path; the dataset prunes partitions by ``where.expression()``."""
        import pyarrow.dataset as ds

        out = []
        expr = where.expression(dates=dates) if where else None
        for k in [kind] if kind else self.kinds():
            dataset = self.dataset(k)
            if dataset is None:
                continue
            for frag in dataset.get_fragments(filter=expr):
                if not frag.path.endswith(".parquet"):
                    continue
                keys = ds.get_partition_keys(frag.partition_expression)
                out.append((frag.path, {p: keys[p] for p in PARTITIONS if keys.get(p) is not None}))
        if not kind and not where:
            out.extend((path, {}) for path in self.loose_parts())
        return sorted(out)

    def files(self, kind: str | None = None, where: Where | None = None) -> list[str]:
        """Every part (of one kind) the selection admits, sorted (see ``parts``)."""
        return [path for path, _ in self.parts(kind, where)]

    def kinds(self) -> list[str]:
        return sorted(i.base_name for i in self._top() if i.type.name == "Directory"
                      and not i.base_name.startswith("."))

    def _top(self) -> list[Any]:
        from pyarrow.fs import FileSelector

        return self.fs.get_file_info(FileSelector(self.root, allow_not_found=True))

    def loose_parts(self) -> list[str]:
        """Parts directly under the root (traces older than the per-kind folders; no partitions)."""
        return sorted(i.path for i in self._top() if i.type.name == "File"
                      and i.base_name.endswith(".parquet") and not i.base_name.startswith("."))


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
