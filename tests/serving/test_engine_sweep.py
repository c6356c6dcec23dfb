"""The engine sweep's pieces without an engine: speculation settings in each engine's terms,
flag axes, the grid, the client's records, and the store keeping what a failed point says."""

from __future__ import annotations

import json

import pytest

from specscope import schema
from specscope.collector.diverge import compare_pair
from specscope.io.parquet import read_parquet, write_parquet
from specscope.serving import client as cl
from specscope.serving.engines import (Axis, CommandServer, EngineOptions, engine_server,
                                       parse_speculation, spec_args)
from specscope.serving.enginesweep import plan_engine


def test_each_engine_takes_its_own_speculation_terms():
    v = parse_speculation("vllm", '{"method": "ngram", "num_speculative_tokens": 4}')
    assert v.name == "ngram-k4" and json.loads(v.get("config"))["method"] == "ngram"
    s = parse_speculation("sglang", "STANDALONE:3/1/4")
    assert s.name == "standalone-3-1-4"
    assert spec_args("sglang", s, EngineOptions(model="m")) == [
        "--speculative-algorithm", "STANDALONE", "--speculative-num-draft-tokens", "4",
        "--speculative-draft-model-path", "m", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1"]
    assert spec_args("sglang", parse_speculation("sglang", "ngram:8"), EngineOptions(model="m")) \
        == ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"]
    ll = parse_speculation("llamacpp", "draft-simple:3")
    assert spec_args("llamacpp", ll, EngineOptions(model="t.gguf", draft="d.gguf")) == [
        "-md", "d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "3"]
    assert parse_speculation("vllm", "off").off


@pytest.mark.parametrize("engine,text", [("vllm", "3/1/4"), ("vllm", '{"method": "ngram"}'),
                                         ("sglang", "STANDALONE:3/1"), ("sglang", "EAGLE:x/1/4"),
                                         ("llamacpp", "draft-simple"), ("llamacpp", ":3"),
                                         ("tgi", "off")])
def test_a_setting_the_engine_would_not_take_is_refused_with_its_syntax(engine, text):
    with pytest.raises(ValueError, match="speculation setting .*: use " if engine != "tgi"
                       else "engine 'tgi'"):
        parse_speculation(engine, text)


def test_axes_and_the_grid():
    assert Axis.parse("max-num-seqs=8,32") == Axis("--max-num-seqs", ("8", "32"))
    assert Axis.args("--x", "on") == ["--x"] and Axis.args("--x", "off") == [] \
        and Axis.args("--x", "8") == ["--x", "8"]
    with pytest.raises(ValueError, match="FLAG=VALUE"):
        Axis.parse("--max-num-seqs")
    points = plan_engine("llamacpp", ["draft-simple:2", "draft-simple:4"], [0.0, 0.8], [1, 4],
                         ["0:32"], axes=["ctx-size=2048,4096"], top_ks=[0, 20])
    # target-only added and first; greedy is not crossed with top-k
    assert points[0].spec.off and sum(p.spec.off for p in points) == 2 * 2 * 3
    assert len(points) == 3 * 2 * 2 * 3 and len({p.name for p in points}) == len(points)
    assert not any(p.top_k for p in points if p.temperature == 0)
    keys = [p.server_key for p in points]
    assert len(keys) - sum(a != b for a, b in zip(keys, keys[1:])) - 1 == len(points) - 6, \
        "each server setting's points are together"
    twins = plan_engine("vllm", ['{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}',
                                 '{"method": "ngram", "num_speculative_tokens": 4}'], [0.0], [1], ["0:8"])
    assert len({p.spec.name for p in twins}) == 3


def test_a_launched_server_fills_port_spec_and_model_and_appends_the_points_flags(tmp_path):
    spec = parse_speculation("llamacpp", "ngram-simple:4")
    srv = engine_server("llamacpp", spec, ["-c", "4096"], tmp_path, "run-1",
                        EngineOptions(model=tmp_path / "m.gguf",
                                      launch="llama-server -m {model} --port {port} {spec}"))
    assert isinstance(srv, CommandServer)
    cmd = srv.command()
    assert cmd[:3] == ["llama-server", "-m", str(tmp_path / "m.gguf")]
    assert cmd[3:5] == ["--port", str(srv.port)]
    assert cmd[5:] == ["--spec-type", "ngram-simple", "--spec-draft-n-max", "4", "-c", "4096"]
    bad = engine_server("llamacpp", spec, [], tmp_path, "r", EngineOptions(model="m", launch="x {gpu}"))
    with pytest.raises(ValueError, match="only {port}"):
        bad.command()


def test_the_clients_record_keeps_tokens_only_where_the_stream_gave_them_all():
    whole = cl.Answer(0, "run:0000", {"id": "p0"}, 0.0, 1_000, t_end_ns=9_000,
                      chunk_times_ns=[2_000, 3_000], text="ab", completion_tokens=2,
                      tokens=["a", "b"], margins=[1.5, 0.01], seconds=["x", "c"])
    rec = cl.request_record(whole, "run")
    assert rec.output_token_ids == (cl.token_id("a"), cl.token_id("b"))
    assert rec.top2_margins == (1.5, 0.01) and rec.second_token_ids[1] == cl.token_id("c")
    assert rec.ttft_s == pytest.approx(1e-6) and rec.num_draft_tokens is None
    # llama.cpp under speculation: the first token's log-probabilities only, its timings
    part = cl.Answer(0, "run:0001", {"id": "p1"}, 0.0, 1_000, t_end_ns=9_000,
                     chunk_times_ns=[2_000], text="ab", completion_tokens=24, tokens=["a"],
                     margins=[None], seconds=[None],
                     timings={"draft_n": 5, "draft_n_accepted": 4})
    rec = cl.request_record(part, "run")
    assert rec.output_token_ids == () and rec.top2_margins == ()
    assert (rec.num_draft_tokens, rec.num_accepted) == (5, 4)
    # without tokens a pair is unknown, never structural
    assert compare_pair(rec, cl.request_record(whole, "ref"), 0.25).verdict == "unknown"
    lat = cl.latency([whole])
    assert lat["ttft_ms_p50"] == pytest.approx(0.001) and lat["itl_ms_p50"] == pytest.approx(0.001)


def test_an_anomaly_keeps_its_kind_through_the_store(tmp_path):
    run = schema.RunRecord(run_id="r", config_id="c", algorithm="none", num_steps=0, topk=0,
                           num_verify_tokens=0, backend="", model="m", engine="vllm", started_ns=1)
    found = schema.AnomalyRecord(run_id="r", kind="sweep_point_failed", severity="critical",
                                 t_ns=2, message="server did not start", evidence={"error": "x"})
    write_parquet([run, found], tmp_path / "store")
    back = [r for r in read_parquet(tmp_path / "store") if isinstance(r, schema.AnomalyRecord)]
    assert back == [found]


def test_tok_s_over_rounds_carries_a_t_interval_and_one_round_none():
    from specscope.serving.client import rounds_interval as _interval

    got = _interval([10.0, 11.0, 12.0])  # mean 11, sd 1, t(2) = 4.303
    assert got["tok_s_round_median"] == 11.0
    assert got["tok_s_ci95"] == pytest.approx([11 - 4.303 / 3 ** 0.5, 11 + 4.303 / 3 ** 0.5])
    assert _interval([10.0]) == {}


def test_a_later_rounds_answers_are_not_more_pairs_against_target_only():
    from specscope.serving.enginesweep import Window, _point_records

    p = plan_engine("llamacpp", ["draft-simple:2"], [0.0], [1], ["0:8"])[1]
    ans = [cl.Answer(0, rid, {"id": "p0"}, 0.0, 1, t_end_ns=5, chunk_times_ns=[2], text="a",
                     completion_tokens=1, tokens=["a"]) for rid in ("sweep-x:0000", "sweep-x/r1:0000")]
    recs = _point_records(Window(p, "sweep-x", ans, 0, 10, [1.0, 1.0], [1, 1]), [], "m", True, "")
    assert [r.prompt_id for r in recs if isinstance(r, schema.RequestRecord)] == ["p0", "p0#r1"]
    assert isinstance(recs[0], schema.RunRecord) and recs[0].run_id == "sweep-x"


def test_the_table_says_why_an_acceptance_is_unknown():
    from specscope.serving.enginesweep import EnginePointResult
    from specscope.serving.sweep import format_engine_sweep

    off, spec = plan_engine("llamacpp", ["ngram-simple:4"], [0.0], [2], ["0:8"])
    from specscope.serving.points import GateOutcome, PointFigures

    figures = PointFigures(GateOutcome("inconclusive", (), (), ()), probe="inconclusive",
                           acceptance_rate=None, acceptance_length=None, tok_s=90.0,
                           ttft_ms_p50=75.0, itl_ms_p50=13.0)
    table = format_engine_sweep([EnginePointResult(off, "a", "ok", figures),
                                 EnginePointResult(spec, "b", "ok", figures)])
    rows = table.splitlines()[2:]
    assert "acceptance unknown" not in rows[0] and "acceptance unknown" in rows[1]
    assert " n/a " in rows[1] and "INCONCLUSIVE" in rows[1]
