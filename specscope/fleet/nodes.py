"""``report --by node`` over traces or a fleet's store: a store is read one node at a time (the
partitions of that node only), so memory holds one node's records, never the fleet's."""

from __future__ import annotations

import os
from typing import Any, Sequence

from ..collector.nodes import NodeShare, node_shares
from ..io.store import UNKNOWN, Where, open_store
from ..io.trace import read_trace, sniff, split_selection


def store_nodes(uri: str, where: Where | None = None) -> list[str]:
    """The node names of a store's partitions under ``where`` ("" where unknown)."""
    nodes = {values.get("node", "") for _, values in open_store(uri).parts(where=where)}
    return sorted("" if n == UNKNOWN else n for n in nodes)


def _is_store(text: str) -> bool:
    from pathlib import Path

    return "://" in text or (Path(text).is_dir() and sniff(Path(text)) == "parquet")


def node_report(paths: Sequence[str | os.PathLike], where: Where | None = None) -> list[NodeShare]:
    """Every run's share per node, checked, over JSONL traces and stores alike."""
    shares: list[NodeShare] = []
    loose: list[Any] = []
    for p in paths:
        text, sel = split_selection(p)
        sel = where.merge(sel) if where and sel else (sel or where)
        if not _is_store(text):
            loose.append(p)
            continue
        for node in store_nodes(text, sel):
            one = (sel or Where()).merge(Where(nodes=(node,)))
            shares.extend(node_shares(read_trace(text, one).records))
    if loose:
        shares.extend(node_shares(read_trace(loose, where).records))
    return sorted(shares, key=lambda s: (s.run_id, s.node))
