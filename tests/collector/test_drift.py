"""Acceptance that ages with uptime: flagged within an hour at 10% an hour, never for a clean
run, a restart (a new level), warm-up or clumped steps; the t distribution it reads."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from specscope import schema
from specscope.collector.detectors import DriftDetector
from specscope.collector.drift import ALL, drift, t_lower
from specscope.io.clock import scale_clock
from specscope.io.trace import read_trace, write_trace
from tests.conftest import run_cli

HOUR = 3_600_000_000_000
T0 = 1_790_000_000_000_000_000


def _run(start_ns: int) -> schema.RunRecord:
    return schema.RunRecord(run_id="r", config_id="c", algorithm="eagle", num_steps=3, topk=1,
                            num_verify_tokens=4, backend="cpu", model="m", started_ns=start_ns)


def _steps(rng: random.Random, start_ns: int, hours: float, rate_at, *, every_s: float = 2.0,
           batch: int = 8, clump: float = 0.0) -> list[schema.VerifyStepRecord]:
    """Verify steps of a chain of three drafts, one every ``every_s``; a draft token at
    position i is accepted with probability ``rate_at(uptime_h) * 0.8**i`` after the ones
    before it. ``clump``: each step's rates move together by up to that much (a step's batch
    shares its contexts), so tokens are not independent."""
    out = []
    n = int(hours * 3600 / every_s)
    for k in range(n):
        up = k * every_s / 3600
        shift = rng.uniform(-clump, clump)
        entries = []
        for j in range(batch):
            a = 0
            while a < 3 and rng.random() < min(1.0, max(0.0, rate_at(up) * 0.8 ** a + shift)):
                a += 1
            entries.append(schema.VerifyEntry(
                request_id=f"q{k}-{j}", num_drafted=3, num_draft_tokens=3, num_accepted=a,
                accepted_per_pos=tuple(int(i < a) for i in range(3)), temperature=0.0))
        out.append(schema.VerifyStepRecord(run_id="r", config_id="c", rank=0, step=k,
                                           t_ns=start_ns + int(up * HOUR) + 1, batch_size=batch,
                                           entries=tuple(entries)))
    return out


def _segments(rng, levels_and_decay, hours=1.0, **kw):
    """One run restarted at every hour: a run record per start, its steps after it."""
    out: list = []
    for i, (level, per_h) in enumerate(levels_and_decay):
        start = T0 + i * int(hours * HOUR) + i
        out.append(_run(start))
        out += _steps(rng, start, hours, lambda up, lv=level, d=per_h: lv * (1 - d * up), **kw)
    return out


def test_the_t_tail_matches_the_tables():
    # P(T <= t) at df: Student's t (values as scipy.stats.t.cdf gives them)
    for t, df, want in ((-2, 10, 0.036694017385370), (-5, 8, 0.000526412896683),
                        (1.5, 3, 0.884708067377589), (-12, 20, 6.79777851294033e-11),
                        (0, 5, 0.5)):
        assert t_lower(t, df) == pytest.approx(want, rel=1e-9)


def test_a_decay_of_a_tenth_an_hour_is_flagged_within_the_hour():
    records = _segments(random.Random(1), [(0.8, 0.10)])
    found = drift(records)
    pooled = next(t for t in found.trends if t.position == ALL)
    assert pooled.flagged and pooled.relative_per_h < -0.05 and pooled.span_h < 1.0
    (a, *_) = DriftDetector().check(records, "r")
    assert a.kind == "acceptance_drift" and a.evidence["restarts"] == 0


def test_a_decay_that_each_restart_resets_adds_up_over_the_segments():
    # three hours, restarted each hour: each hour alone decays 6%, all three are one slope
    records = _segments(random.Random(2), [(0.8, 0.06)] * 3)
    found = drift(records)
    assert found.restarts == 2
    pooled = next(t for t in found.trends if t.position == ALL)
    assert pooled.flagged and pooled.segments == 3


@pytest.mark.parametrize("seed", range(12))
def test_clean_runs_restarts_warm_up_and_clumped_steps_never_alarm(seed):
    rng = random.Random(100 + seed)
    # a restart that comes back lower (a new level, not a trend), then a warm-up that rises
    levels = [(0.8, 0.0), (0.6, 0.0)]
    records = _segments(rng, levels, clump=0.15)
    start = T0 + 3 * HOUR
    records.append(_run(start))
    records += _steps(rng, start, 1.0, lambda up: 0.5 + 0.3 * min(up * 6, 1.0), clump=0.15)
    found = drift(records)
    assert found.restarts == 2 and not found.flagged, [t for t in found.trends if t.p_value < 0.01]


def test_without_restarts_the_same_levels_would_read_as_a_fall():
    # what the segments are for: the restart's lower level pooled into one stretch is a slope
    rng = random.Random(7)
    records = _segments(rng, [(0.8, 0.0), (0.6, 0.0)])
    (kept,) = [t for t in drift(records).trends if t.position == ALL]
    assert abs(kept.relative_per_h) < 0.03 and not kept.flagged
    unrestarted = [r for r in records if not isinstance(r, schema.RunRecord)]
    (pooled,) = [t for t in drift([_run(T0)] + unrestarted).trends if t.position == ALL]
    # a slope of about -0.1 of the rate an hour: a step read as a trend (the spans' residuals
    # about a line through a step move together, so its evidence is discounted, not trusted)
    assert pooled.relative_per_h < -0.1 and pooled.t < kept.t


def test_a_counter_scrape_is_read_per_position_and_a_changed_start_is_a_restart():
    out = [_run(T0)]
    for i in range(120):  # a scrape a minute for two hours, acceptance falling 10% an hour
        up = (i % 60) / 60  # each hour from its start: the decay starts again at the restart
        rate = 0.7 * (1 - 0.1 * up)
        acc = tuple(round(4000 * rate * 0.8 ** p) for p in range(3))
        if i == 60:
            out.append(_run(T0 + HOUR))
        out.append(schema.SpecCountsRecord(run_id="r", t_ns=T0 + i * 60_000_000_000 + 1,
                                           num_drafts=4000, num_draft_tokens=12000,
                                           num_accepted=sum(acc), accepted_per_pos=acc))
    found = drift(out)
    assert found.restarts == 1
    assert {t.position for t in found.flagged} >= {ALL, 0}


def test_acceptance_that_wanders_between_spans_is_not_read_as_a_trend():
    # no trend: the rate wanders from span to span (lag-one correlation 0.7, step sd 0.02),
    # three restarted segments; the error grows with the spans' correlation
    from specscope.collector.drift import Bin, fit

    rng = random.Random(11)
    ps = []
    for _ in range(300):
        bins = []
        for seg in range(3):
            e = 0.0
            for i in range(24):
                e = 0.7 * e + rng.gauss(0, 0.02)
                p = 0.6 + e
                a = round(3000 * p + rng.gauss(0, (3000 * p * (1 - p)) ** 0.5))
                bins.append(Bin(seg, (i + 0.5) / 24, 0, 3000, a, 1000, i))
        ps.append(fit(("", ALL), bins).p_value)
    assert sum(p < 0.05 for p in ps) < 0.1 * len(ps)  # near its 5% (22% without the correction)
    assert min(ps) > 1e-4 / 4


def test_each_node_restarts_on_its_own():
    # node a decays steadily for two hours; node b restarts at one hour: a's records stay one
    # segment, so its decay is still one slope
    rng = random.Random(4)
    out: list = []
    for node, restarts in (("a", [0]), ("b", [0, 1])):
        for h in restarts:
            out.append(dataclasses.replace(_run(T0 + h * HOUR + 1), node=node))
        out += [dataclasses.replace(r, node=node) for r in _steps(
            rng, T0, 2.0, lambda up, n=node: 0.8 * (1 - 0.08 * up) if n == "a" else 0.8)]
    found = drift(out)
    assert found.restarts == 2  # three segments: a's one, b's two
    assert {s.node for s in found.segments} == {"a", "b"}
    pooled = next(t for t in found.trends if t.position == ALL)
    assert pooled.flagged, pooled


def test_scaling_the_clock_moves_every_stamp_from_the_earliest():
    run = _run(T0)
    req = schema.RequestRecord(run_id="r", rank=0, request_id="q", t_arrival_ns=T0 + 10,
                               t_first_token_ns=T0 + 20, t_finish_ns=0, num_prompt_tokens=1,
                               num_output_tokens=1, chunk_times_ns=(T0 + 20, T0 + 30))
    scaled = scale_clock([run, req], 100.0)
    assert scaled[0].started_ns == T0
    assert (scaled[1].t_arrival_ns, scaled[1].t_first_token_ns) == (T0 + 1000, T0 + 2000)
    assert scaled[1].t_finish_ns == 0 and scaled[1].chunk_times_ns == (T0 + 2000, T0 + 3000)
    with pytest.raises(ValueError):
        scale_clock([run], 0)


def _anomalies(*args) -> list[dict]:
    rep = run_cli("report", *args, "--json")
    assert rep.returncode == 0, rep.stderr
    return [a for r in json.loads(rep.stdout)["runs"] for a in r["anomalies"]]


RECORD = ["record", "--model", "tiny", "--concurrency", "32", "--max-new-tokens", "128",
          "--temperature", "0.7", "--categories", "math", "--no-reference", "--quiet"]


def test_the_reference_decoders_aging_fault_is_flagged_and_its_clean_restart_is_not(tmp_path):
    """The seeded fault (a share of rows' drafts rejected growing with the steps served: about
    a tenth over the 1,200 steps here), its run read as an hour of uptime; two clean runs of
    the same configuration one after the other (a restart), read as two hours."""
    decay = tmp_path / "decay.jsonl"
    rec = run_cli(*RECORD, "--requests", "640", "--fault", "acceptance_decay", "-o", str(decay))
    assert rec.returncode == 0, rec.stderr
    flagged = [a for a in _anomalies(str(decay), "--clock-scale", "300")
               if a["kind"] == "acceptance_drift"]
    assert flagged and all(a["evidence"]["relative_per_h"] < 0 for a in flagged)
    records = []
    for i in range(2):  # two engine starts of one run: the second run's records under the first's id
        path = tmp_path / f"clean{i}.jsonl"
        rec = run_cli(*RECORD, "--requests", "320", "--seed", str(i), "-o", str(path))
        assert rec.returncode == 0, rec.stderr
        records += [dataclasses.replace(r, run_id="clean") if hasattr(r, "run_id") else r
                    for r in read_trace(path).records]
    write_trace(tmp_path / "restarted.jsonl", records)
    rep = run_cli("report", str(tmp_path / "restarted.jsonl"), "--clock-scale", "600", "--by",
                  "uptime", "--json")
    (run,) = json.loads(rep.stdout)["runs"]
    assert run["restarts"] == 1 and run["trends"], run["trends"]
    assert not [t for t in run["trends"] if t["flagged"]], run["trends"]
    found = _anomalies(str(tmp_path / "restarted.jsonl"), "--clock-scale", "600")
    assert not [a for a in found if a["kind"] == "acceptance_drift"], found



def test_untimed_records_get_a_reason_not_an_empty_table():
    """A log import with no clock (llama.cpp's, saved responses): the uptime view says why it
    shows nothing, rather than printing its legend alone."""
    from specscope.collector.uptime import format_uptime, uptime_runs

    untimed = [schema.SpecCountsRecord(run_id="r", rank=0, t_ns=0, num_drafts=10,
                                       num_draft_tokens=30, num_accepted=12)]
    assert uptime_runs(untimed) == []
    assert "carries no clock" in format_uptime(uptime_runs(untimed))
