"""`specscope diverge`: first divergence against target-only greedy decoding."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specscope import schema
from specscope.collector.diverge import TIE_MARGIN, compare_pair, repetition
from tests.conftest import run_cli


def _req(rid, tokens, margins=(), seconds=(), finish="length"):
    return schema.RequestRecord(run_id="r", rank=0, request_id=rid, prompt_id=rid, t_arrival_ns=0,
                                t_first_token_ns=1, t_finish_ns=2, num_prompt_tokens=3,
                                num_output_tokens=len(tokens), output_token_ids=tuple(tokens),
                                finish_reason=finish, top2_margins=tuple(margins),
                                second_token_ids=tuple(seconds))


def test_a_near_tie_is_a_tie_flip_and_a_firm_margin_is_structural():
    ref = _req("a", [1, 2, 3, 4, 5], margins=[3.0, 2.0, 0.0004, 1.0, 1.0], seconds=[9, 9, 7, 9, 9])
    tie = compare_pair(_req("a", [1, 2, 7, 4, 5]), ref, TIE_MARGIN["float32"])
    assert (tie.first_index, tie.rank, tie.verdict) == (2, 2, "tie-flip")
    firm = compare_pair(_req("a", [1, 9, 3, 4, 5]), ref, TIE_MARGIN["float32"])
    assert (firm.first_index, firm.margin, firm.rank, firm.verdict) == (1, 2.0, 2, "structural")
    # a margin of exactly the tie margin (2 bfloat16 ulps at a top logit of 16-32, as a real
    # vLLM's greedy answer flipped at) is a tie, read back from rounded log-probabilities too;
    # beyond it, structural
    for margin, verdict in ((0.25, "tie-flip"), (0.25000003, "tie-flip"), (0.2502, "structural")):
        edge = _req("a", [1, 2, 3], margins=[3.0, margin, 1.0], seconds=[9, 7, 9])
        assert compare_pair(_req("a", [1, 7, 3]), edge, TIE_MARGIN["bfloat16"]).verdict == verdict
    # a token the reference ranked below second is structural even at a small margin
    far = compare_pair(_req("a", [1, 2, 8]), ref, TIE_MARGIN["bfloat16"])
    assert (far.rank, far.verdict) == (None, "structural")
    assert compare_pair(_req("a", [1, 2, 3, 4, 5]), ref, 1e-3).verdict == "identical"
    # a request that stopped where the reference went on diverges there
    assert compare_pair(_req("a", [1, 2], finish="stop"), ref, 1e-3).first_index == 2
    # no margins recorded: the verdict waits
    assert compare_pair(_req("a", [1, 9]), _req("a", [1, 2]), 1e-3).verdict == "unknown"
    assert repetition([1, 2, 3, 4] * 6) > 0.8 and repetition(list(range(30))) == 0.0


@pytest.mark.parametrize("fault,verdict", [("", "PASS"), ("greedy_second_choice", "FAIL")])
def test_diverge_on_recorded_greedy_runs(tmp_path, fault, verdict):
    """A clean greedy run of the reference decoder has no structural divergence, and 13 pairs
    rule one in 30% of requests out; one whose verify commits the target's second choice every
    8th step FAILs, with request and index."""
    trace = tmp_path / "t.jsonl"
    args = ["record", "--model", "tiny", "--requests", "13", "--concurrency", "4",
            "--max-new-tokens", "40", "--temperature", "0", "--quiet", "-o", str(trace)]
    out = run_cli(*(args + (["--fault", fault] if fault else [])))
    assert out.returncode == 0, out.stderr
    out = run_cli("diverge", str(trace), "--json")
    assert out.returncode == (1 if verdict == "FAIL" else 0), out.stderr
    (res,) = json.loads(out.stdout)
    assert res["summary"]["verdict"] == verdict and res["summary"]["pairs"] == 13
    structural = [p for p in res["pairs"] if p["verdict"] == "structural"]
    if verdict == "PASS":
        assert not structural
    else:
        assert structural and all(p["first_index"] is not None and p["rank"] == 2 for p in structural)
        text = run_cli("diverge", str(trace)).stdout
        assert f"structural {structural[0]['request_id']}: token {structural[0]['first_index']}" in text


def test_the_gates_exact_match_reads_the_divergence_verdict():
    """Exact match 0.8 < 0.95 fails on its own; where diverge found only tie-flips it passes
    (numerics, said so), and one structural divergence keeps it failed."""
    from specscope.collector.evalgate import eval_gate
    from specscope.collector.stats import SpecStats

    s = SpecStats()
    s.evals["exact_match"] = [8, 10]

    def state(divergence):
        (c,) = [c for c in eval_gate(s, None, divergence=divergence)["checks"]
                if c["check"].startswith("greedy exact match")]
        return c["state"]

    assert state(None) == "fail"
    assert state({"pairs": 10, "structural": 0, "verdict": "PASS"}) == "pass"
    assert state({"pairs": 10, "structural": 1, "verdict": "FAIL"}) == "fail"
    assert state({"pairs": 10, "structural": 0, "verdict": "INCONCLUSIVE"}) == "inconclusive"


def test_the_accuracy_page_shows_each_runs_divergences(tmp_path):
    """The Accuracy page's figure and table over a recorded trace with a seeded structural
    fault: the run's greedy requests are stacked by verdict, structural first in the table."""
    from types import SimpleNamespace

    from specscope.dashboard.figures.classes import divergence_figure, divergence_rows
    from specscope.io.trace import read_trace

    trace = tmp_path / "t.jsonl"
    assert run_cli("record", "--model", "tiny", "--requests", "4", "--concurrency", "4",
                   "--max-new-tokens", "32", "--temperature", "0", "--fault", "greedy_second_choice",
                   "--quiet", "-o", str(trace)).returncode == 0
    records = read_trace([trace]).records
    run = next(r for r in records if isinstance(r, schema.RunRecord) and r.num_steps)
    view = SimpleNamespace(run_id=run.run_id, label=run.run_id, run=run, records=records)
    fig = divergence_figure([view])
    stacked = {t.name: sum(t.y) for t in fig.data}
    assert stacked.get("structural") and sum(stacked.values()) == 4
    rows = divergence_rows([view])
    assert rows[0]["verdict"] == "structural" and rows[0]["committed"] == "2nd"
    # the worst request's two outputs side by side from the divergence on (the tiny model has
    # no tokenizer: token ids, starting at the divergent token)
    from specscope.dashboard.figures.classes import worst_rows

    (worst,) = worst_rows([view])
    mine = next(r for r in records if isinstance(r, schema.RequestRecord) and r.run_id == run.run_id
                and worst["request"].startswith(r.request_id + " "))
    first = int(worst["request"].rsplit("token ", 1)[1].rstrip(")"))
    assert "structural" in worst["request"]
    assert worst["this run"].split()[0] == str(mine.output_token_ids[first])
    assert worst["this run"].split()[0] != worst["target-only"].split()[0]


def test_side_by_side_splits_texts_at_their_first_difference():
    from specscope.collector.diverge import side_by_side, worst
    from specscope.collector.diverge import DivergeResult, Pair

    shared = "The answer to the question, after some thought, is"
    mine = dataclasses.replace(_req("a", [1, 2, 3]), output_text=shared + " 42, and that is all.")
    ref = dataclasses.replace(_req("a", [1, 2, 4]), output_text=shared + " 41, because of the sum.")
    lead, a, b = side_by_side(mine, ref, 2, before=20)
    assert lead == "…" + (shared + " 4")[-20:]
    assert a.startswith("2, and") and b.startswith("1, because")
    # no text: token ids from the divergent index, eight before it as the context
    lead, a, b = side_by_side(_req("a", list(range(20)) + [7]), _req("a", list(range(20)) + [9]), 20)
    assert (a, b) == ("7", "9") and lead == "tokens …12 13 14 15 16 17 18 19"
    pairs = [Pair("t", "t", 3, 1e-4, 2, "tie-flip", 0.1, None, None, 1, 2),
             Pair("s", "s", 9, 2.0, 2, "structural", 0.9, None, None, 1, 2),
             Pair("u", "u", 5, 2.0, 2, "structural", 0.2, None, None, 1, 2)]
    assert worst(DivergeResult("r", "ref", "float32", 1e-3, pairs)).request_id == "u"


def test_recompute_gives_the_margins_the_reference_decoder_recorded(tmp_path):
    """A greedy trace whose reference lost its margins: `diverge --recompute tiny` runs the
    target over each reference request's prompt and output and finds the margins the decoder
    had recorded (batched decoding vs one pass: float32 rounding only), so a seeded structural
    fault is FAIL again instead of unknown."""
    from specscope.engine.margins import recompute
    from specscope.engine.models import load_pair
    from specscope.io.trace import read_trace

    trace = tmp_path / "t.jsonl"
    assert run_cli("record", "--model", "tiny", "--requests", "4", "--concurrency", "4",
                   "--max-new-tokens", "24", "--temperature", "0", "--fault", "greedy_second_choice",
                   "--quiet", "-o", str(trace)).returncode == 0
    records = read_trace([trace]).records
    refs = {r.run_id for r in records if isinstance(r, schema.RunRecord) and r.labels.get("role") == "reference"}
    recorded = {r.request_id: r for r in records if isinstance(r, schema.RequestRecord) and r.run_id in refs}
    stripped = [dataclasses.replace(r, top2_margins=(), second_token_ids=())
                if isinstance(r, schema.RequestRecord) else r for r in records]
    done = recompute(stripped, load_pair("tiny"), refs)
    assert done.recomputed == 4 and not done.skipped
    for r in done.records:
        if isinstance(r, schema.RequestRecord) and r.run_id in refs:
            want = recorded[r.request_id]
            assert r.second_token_ids == want.second_token_ids
            assert max(abs(a - b) for a, b in zip(r.top2_margins, want.top2_margins)) < 1e-4
    bare = tmp_path / "bare.jsonl"
    with open(bare, "w", encoding="utf-8") as f:
        for line in trace.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            rec.pop("top2_margins", None), rec.pop("second_token_ids", None)
            f.write(json.dumps(rec) + "\n")
    (res,) = json.loads(run_cli("diverge", str(bare), "--json").stdout)
    assert res["summary"]["verdict"] == "INCONCLUSIVE"
    out = run_cli("diverge", str(bare), "--json", "--recompute", "tiny")
    (res,) = json.loads(out.stdout)
    assert res["summary"]["verdict"] == "FAIL" and "for 4 reference requests" in out.stderr
