"""Acceptance against uptime across a fleet: nodes started at different times show a decay of
1% an hour at once (an interval across nodes that excludes 0); a clean fleet whose nodes differ
in level shows none; a node without a known start is left out and counted."""

from __future__ import annotations

import json
import random

import pytest

from specscope import schema
from specscope.fleet.aging import aging, fleet_aging, t_quantile
from tests.conftest import run_cli

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")
HOUR = 3_600_000_000_000
NOW = 1_789_999_800_000_000_000  # on a 10-minute boundary


def _node(node: str, age_h: float, rate_at, rng: random.Random, *, start_known: bool = True
          ) -> list:
    """One node's run (its engine started ``age_h`` hours before the hour of traffic), and
    that hour's verify steps: a chain of three at each of 240 steps, four requests each."""
    start = NOW - int(age_h * HOUR)
    run = schema.RunRecord(run_id="fleet", config_id="eagle-s3", algorithm="eagle", num_steps=3,
                           topk=1, num_verify_tokens=4, backend="cuda", model="m", node=node,
                           started_ns=start if start_known else 0)
    out: list = [run]
    for k in range(240):
        t = NOW + k * 15_000_000_000
        up = (t - start) / HOUR
        entries = []
        for j in range(4):
            a = 0
            while a < 3 and rng.random() < rate_at(node, up):
                a += 1
            entries.append(schema.VerifyEntry(request_id=f"{node}-{k}-{j}", num_drafted=3,
                                              num_draft_tokens=3, num_accepted=a,
                                              accepted_per_pos=tuple(int(i < a) for i in range(3)),
                                              temperature=0.0))
        out.append(schema.VerifyStepRecord(run_id="fleet", config_id="eagle-s3", rank=0, step=k,
                                           t_ns=t, batch_size=4, entries=tuple(entries), node=node))
    return out


def _store(tmp_path, rate_at, *, unknown: str = "") -> str:
    from specscope.io.parquet import write_parquet

    rng = random.Random(5)
    root = str(tmp_path / "store")
    for i, age in enumerate((0.5, 4, 8, 12, 16, 20)):
        node = f"gpu-{i}"
        write_parquet(_node(node, age, rate_at, rng, start_known=node != unknown), root)
    return root


def test_nodes_of_different_ages_show_a_decay_at_once(tmp_path):
    store = _store(tmp_path, lambda node, up: 0.75 * (1 - 0.01 * up), unknown="gpu-5")
    (a,) = fleet_aging(store)
    assert a.nodes == 5 and a.unknown_start_spans == 6  # gpu-5's hour, six 10-minute spans
    lo, hi = a.ci95
    assert hi < 0, a  # the interval excludes 0
    # per draft token (positions accepted as 0.75, 0.75^2, 0.75^3, each falling 1% an hour
    # per factor): about 0.58 at start, falling 1.8% of it an hour
    assert 0.5 < a.rate_at_start < 0.7 and -0.03 < a.relative_per_h < -0.01, a
    assert a.uptime_h[1] > 15
    out = run_cli("fleet", store, "--aging", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["aging"][0]["ci95"][1] < 0
    assert "falls with uptime" in run_cli("fleet", store, "--aging").stdout


def test_a_clean_fleet_of_uneven_nodes_rules_in_no_trend(tmp_path):
    levels = {f"gpu-{i}": v for i, v in enumerate((0.7, 0.62, 0.75, 0.66, 0.71, 0.69))}
    (a,) = fleet_aging(_store(tmp_path, lambda node, up: levels[node]))
    assert a.ci95[0] < 0 < a.ci95[1], a


def test_the_interval_quantile_and_too_few_nodes():
    assert t_quantile(0.975, 4) == pytest.approx(2.776445, abs=1e-5)
    rows = [("c", "n1", "r", 1, 100, 60), ("c", "n2", "r", 1, 100, 50)]
    assert aging(rows, {("r", "n1"): [0], ("r", "n2"): [0]}) == []  # two nodes: no fit


def test_spark_fits_duckdbs_aging_exactly(tmp_path, spark_ready):
    store = _store(tmp_path, lambda node, up: 0.75 * (1 - 0.01 * up))
    assert fleet_aging(store, engine="spark") == fleet_aging(store)
