"""Runs side by side with bootstrap intervals, and the cross-run regression table."""

from __future__ import annotations

import json

import pytest

from specscope.collector.compare import compare, regression_series, run_sample
from specscope.io.trace import read_trace
from tests.conftest import run_cli

COMMON = ["record", "--model", "tiny", "--requests", "16", "--concurrency", "8",
          "--max-new-tokens", "48", "--temperature", "0.7", "--quiet"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cmp")
    out = {}
    for name, extra in (("good0", ["--seed", "0"]), ("good1", ["--seed", "1"]),
                        ("bad", ["--fault", "draft_prob_shortcut"]),
                        ("greedy", ["--seed", "2", "--temperature", "0"])):
        path = tmp / f"{name}.jsonl"
        assert run_cli(*COMMON, *extra, "-o", str(path)).returncode == 0
        out[name] = path
    return out


def _sample(path):
    records = read_trace(path).records
    (run,) = [r for r in records if type(r).__name__ == "RunRecord" and r.labels.get("role") == "measured"]
    return run_sample(records, run.run_id)


def test_a_run_against_itself_shows_no_difference(traces):
    s = _sample(traces["good0"])
    rows = {r["metric"]: r for r in compare(s, s, n_boot=500)}
    for m in ("mean_acceptance_length", "acceptance_rate", "tpot_ms", "tok_s_per_user"):
        assert rows[m]["delta_pct"] == 0 and rows[m]["ci_pct"][0] <= 0 <= rows[m]["ci_pct"][1]
        assert rows[m]["verdict"] == "no significant difference"
    assert rows["output_tok_s"]["ci_pct"] is None  # one wall-clock rate per run: no fake interval


def test_the_broken_draft_is_significantly_worse_and_fails_its_gate(traces):
    rows = {r["metric"]: r for r in compare(_sample(traces["good0"]), _sample(traces["bad"]), n_boot=500)}
    al = rows["mean_acceptance_length"]
    assert al["delta_pct"] < -20 and al["ci_pct"][1] < 0 and al["verdict"] == "worse"
    assert rows["eval_gate_b"]["b"] == "fail" and rows["eval_gate_b"]["verdict"] == "FAIL"
    # 16 requests cannot show a 30-point rise in invalid output against a 16-request reference:
    # the clean run passes every check that could have failed and says what the rest need
    assert rows["eval_gate_a"]["a"] == "inconclusive"
    assert rows["eval_gate_a"]["verdict"].startswith("INCONCLUSIVE (")


def test_regression_series_marks_the_first_bad_run(traces):
    series = regression_series([_sample(traces[n]) for n in ("good0", "good1", "bad", "good1")],
                               n_boot=300)
    # the clean runs are not bad; the first has no baseline to rule a rise out against, the
    # later ones' 16 requests rule a 30-point rise in loops and invalid outputs out
    assert [e["verdict"] for e in series] == ["inconclusive", "good", "bad", "good"]
    assert series[0]["gate_text"].startswith("INCONCLUSIVE (")
    assert [e["first_bad"] for e in series] == [False, False, True, False]
    assert series[3]["baseline"] == series[1]["run_id"]  # compared with the last good run
    assert "draft_prob_collapse" in series[2]["anomalies"]


def test_cli_compare_and_regress(traces):
    out = run_cli("compare", str(traces["good0"]), str(traces["bad"]), "--json", "--bootstrap", "300")
    rows = {r["metric"]: r for r in json.loads(out.stdout)["rows"]}
    assert rows["acceptance_rate"]["verdict"] == "worse"
    text = run_cli("regress", str(traces["good0"]), str(traces["bad"]), "--bootstrap", "200").stdout
    assert "<- first bad" in text.splitlines()[-1] and "2 run(s)" in text.splitlines()[0]


def test_regress_compares_like_with_like(traces):
    """A temperature-0 run among temperature-0.7 runs is its own group: never the baseline of
    the others, and told that it has nothing to compare with."""
    series = regression_series([_sample(traces[n]) for n in ("good0", "greedy", "good1")], n_boot=200)
    by = {e["run_id"]: e for e in series}
    greedy, good1 = series[1], series[2]
    assert greedy["group"] != good1["group"] and "t=0 " in greedy["group"] + " "
    assert greedy["group_runs"] == 1 and "nothing to compare" in greedy["note"]
    assert greedy["baseline"] is None and good1["baseline"] == series[0]["run_id"]
    assert len(by) == 3


def _depth_run(run_id, depth, per_step, n_requests=40, seed=0):
    """``n_requests`` requests of 10 verify steps at draft depth ``depth``, each accepting
    ``per_step(rng, depth)`` drafts."""
    import random

    from specscope import schema

    rng = random.Random(seed)
    out = [schema.RunRecord(run_id=run_id, config_id=f"c{depth}", algorithm="ngram", num_steps=depth,
                            topk=1, num_verify_tokens=depth + 1, backend="cpu", model="m")]
    for q in range(n_requests):
        for i in range(10):
            a = per_step(rng, depth)
            out.append(schema.VerifyStepRecord(
                run_id=run_id, config_id=f"c{depth}", rank=0, step=q * 10 + i, t_ns=(q * 10 + i) * 10 ** 6,
                batch_size=1, draft_depth=depth, entries=(schema.VerifyEntry(
                    request_id=f"q{q}", num_drafted=depth, num_draft_tokens=depth, num_accepted=a,
                    accepted_per_pos=(1,) * a + (0,) * (depth - a), temperature=0.0),)))
        out.append(schema.RequestRecord(run_id=run_id, rank=0, request_id=f"q{q}", t_arrival_ns=q * 10 ** 7,
                                        t_first_token_ns=q * 10 ** 7 + 10 ** 6, t_finish_ns=q * 10 ** 7 + 10 ** 7,
                                        num_prompt_tokens=4, num_output_tokens=20))
    return out


def test_a_lower_acceptance_length_at_a_shallower_depth_is_not_a_regression():
    """Adaptive verification (vLLM #52992): the same per-token acceptance at depth 2 instead of 4
    lowers acceptance length; compare says why instead of calling it worse. At the same depth
    the same drop is worse."""
    from specscope.collector.compare import compare, run_sample

    def chain(rng, depth):  # each drafted token accepted with probability 0.8, as a chain
        a = 0
        while a < depth and rng.random() < 0.8:
            a += 1
        return a

    deep, shallow = _depth_run("deep", 4, chain), _depth_run("shallow", 2, chain, seed=1)
    rows = {r["metric"]: r for r in compare(run_sample(deep, "deep"), run_sample(shallow, "shallow"))}
    al = rows["mean_acceptance_length"]
    assert al["b"] < al["a"] and al["verdict"].startswith("lower with a shallower verified depth"), al
    assert "4.00 -> 2.00" in al["verdict"]
    worse = _depth_run("worse", 4, lambda rng, d: chain(rng, 1), seed=2)
    rows = {r["metric"]: r for r in compare(run_sample(deep, "deep"), run_sample(worse, "worse"))}
    assert rows["mean_acceptance_length"]["verdict"] == "worse"
