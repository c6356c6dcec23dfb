"""Bounded under floods, private by default: label cardinality is capped and counted and
/metrics stays bounded; every server binds 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import pytest

from specscope import schema
from specscope.cli import build_parser
from specscope.collector.service import Collector
from specscope.exporters.prometheus import render


def _records(i: int):
    run = schema.RunRecord(run_id=f"r{i}", config_id="c", algorithm="eagle", num_steps=3,
                           topk=1, num_verify_tokens=4, backend="cpu", model=f"model-{i}")
    step = schema.VerifyStepRecord(
        run_id=f"r{i}", config_id="c", rank=0, step=0, t_ns=1_000_000_000 + i, batch_size=1,
        entries=(schema.VerifyEntry(request_id="q", num_drafted=3, num_draft_tokens=3,
                                    num_accepted=1, accepted_per_pos=(1, 0, 0), temperature=0.0),))
    return [run, step]


def test_a_flood_of_label_values_is_capped_counted_and_metrics_stay_bounded(figure):
    c = Collector()
    for i in range(65):
        c.observe(_records(i))
    size_at_cap = len(render(c.snapshot()))
    for i in range(65, 10_000):
        c.observe(_records(i))
    snap = c.snapshot()
    size_after = len(render(snap))
    assert len(snap.totals) == 65  # 64 label sets and "other"
    assert snap.health["label_sets_overflowed"] == 10_000 - 64
    assert sum(s.accepted_tokens for s in snap.totals.values()) == 10_000  # nothing lost
    assert size_after <= size_at_cap * 1.01  # only counter values grew, not series
    assert 'label_sets_overflowed' in render(snap)  # the overflow itself is exported
    figure("cardinality flood (10,000 distinct models)", bounded=True,
           label_sets_kept=len(snap.totals),
           overflowed_and_counted=snap.health["label_sets_overflowed"],
           metrics_bytes_at_cap=size_at_cap, metrics_bytes_after=size_after)


@pytest.mark.parametrize("argv,host_attr", [
    (["serve"], "metrics_host"), (["record"], "metrics_host"), (["replay", "x"], "metrics_host"),
    (["serve-engine"], "host"), (["dashboard", "x"], "host"), (["demo"], "host")])
def test_every_server_binds_loopback_by_default(argv, host_attr):
    args = build_parser().parse_args(argv)
    assert getattr(args, host_attr) == "127.0.0.1"
    if argv[0] == "serve":
        assert args.listen.startswith("tcp://127.0.0.1:")
