"""Dashboard sources: traces (only under their directories), live collectors, /metrics
endpoints, accuracy files, basic auth."""

from __future__ import annotations

import json
import os

import pytest

from specscope import schema
from specscope.collector.service import Collector
from specscope.dashboard import LiveSource, MetricsSource, TraceSource, create_app
from specscope.dashboard.data import PathNotAllowed, allowed, load_accuracy
from specscope.io.trace import read_trace


def test_trace_source_reads_runs_with_their_gates_and_anomalies(dash_traces):
    views = {v.run_id: v for v in TraceSource([dash_traces]).runs()}
    assert set(views) == {"clean-s3", "faulted-s2"}  # references are not runs of their own
    assert views["faulted-s2"].gate == "fail"
    # 16 requests: every check that could fail passed; output quality may need more requests
    clean = views["clean-s3"].section.as_dict()["eval"]["gate"]
    assert clean["verdict"] in ("pass", "inconclusive")
    assert not [c for c in clean["checks"] if c["state"] == "fail"]
    assert [a["kind"] for a in views["faulted-s2"].section.as_dict()["anomalies"]] == ["silent_greedy"]
    assert views["clean-s3"].phases["committed_tokens"] > 0  # the phase timer was on
    sample = views["clean-s3"].sample()
    assert sample.tokens.size == 16 and sample.reference is not None


def test_traces_outside_the_configured_directories_are_refused(tmp_path, dash_traces):
    inside, outside = tmp_path / "traces", tmp_path / "secret"
    inside.mkdir(), outside.mkdir()
    (outside / "x.jsonl").write_text((dash_traces / "clean.jsonl").read_text())
    (inside / "ok.jsonl").write_text((dash_traces / "clean.jsonl").read_text())
    os.symlink(outside / "x.jsonl", inside / "link.jsonl")
    src = TraceSource([inside / "ok.jsonl"], roots=[inside])
    for bad in (inside / ".." / "secret" / "x.jsonl", "/etc/passwd", inside / "link.jsonl",
                str(inside) + "/../secret/x.jsonl"):
        with pytest.raises(PathNotAllowed, match="outside the dashboard's trace directories"):
            src.open(bad)
    assert allowed(inside / "ok.jsonl", [inside]) == (inside / "ok.jsonl").resolve()
    with pytest.raises(PathNotAllowed):
        TraceSource([outside / "x.jsonl"], roots=[inside])


def test_a_trace_that_changes_is_reloaded(tmp_path, dash_traces):
    path = tmp_path / "grow.jsonl"
    records = read_trace(dash_traces / "clean.jsonl").records
    clean = [r for r in records if getattr(r, "run_id", "").startswith("clean-s3")]
    path.write_text("")
    src = TraceSource([path])
    assert src.runs() == [] and "empty file" in src.problems[0]  # reported, not fatal
    from specscope.io.trace import write_trace

    write_trace(path, clean)
    os.utime(path, (1e9, 2e9))  # a new mtime even on coarse clocks
    assert [v.run_id for v in src.runs()] == ["clean-s3"]


def test_a_directory_of_shards_is_one_run(tmp_path, dash_traces):
    """A run recorded by several processes (an engine core's verify steps, its API server's
    requests) in one directory is one run on the dashboard, with every process's figures; a
    link in the directory that leads out of it is not read."""
    from specscope.io.trace import write_trace

    records = [r for r in read_trace(dash_traces / "clean.jsonl").records
               if getattr(r, "run_id", "").startswith("clean-s3")]
    whole = {v.run_id: v for v in TraceSource([dash_traces / "clean.jsonl"]).runs()}["clean-s3"]
    shards = tmp_path / "run"
    shards.mkdir()
    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    assert steps and len(steps) < len(records)
    write_trace(shards / "clean-engine-1.jsonl",
                [r for r in records if isinstance(r, schema.RunRecord)] + steps)
    write_trace(shards / "clean-api-2.jsonl",
                [r for r in records if not isinstance(r, schema.VerifyStepRecord)])
    outside = tmp_path / "elsewhere.jsonl"
    write_trace(outside, records)
    os.symlink(outside, shards / "link.jsonl")
    views = [v for v in TraceSource([shards]).runs() if v.run_id == "clean-s3"]
    assert len(views) == 1
    shown, expected = views[0].section.totals, whole.section.totals
    assert shown == expected and shown.num_requests > 0 and shown.num_verify_steps > 0


def test_live_and_metrics_sources_agree_with_the_collector(dash_traces):
    from specscope.exporters.http import MetricsServer

    records = read_trace(dash_traces / "faulted.jsonl").records
    measured = [r for r in records if getattr(r, "run_id", "") == "faulted-s2"]
    collector = Collector()
    collector.observe(measured[: len(measured) // 2])
    server = MetricsServer(collector, port=0).start()
    try:
        src = MetricsSource(server.url)
        first = src.runs()
        collector.observe(measured[len(measured) // 2:])
        collector.tick()  # the detectors' pass, as the collector's own ticker runs it
        live, polled = LiveSource(collector).runs(), src.runs()
    finally:
        server.close()
    assert len(live) == len(polled) == 1
    lt, pt = live[0].section.as_dict()["totals"], polled[0].section.as_dict()["totals"]
    for key in ("accepted_tokens", "draft_tokens", "num_drafts", "per_position_acceptance"):
        assert lt[key] == pt[key], key
    assert live[0].run.fault == "silent_greedy"
    assert {a["kind"] for a in live[0].section.as_dict()["anomalies"]} >= {"silent_greedy"}
    assert {a["kind"] for a in polled[0].section.as_dict()["anomalies"]} >= {"silent_greedy"}
    # two polls make one window: the increase between them
    win = polled[0].section.as_dict()["windows"]
    assert len(win) == 1 and win[0]["accepted_tokens"] == pt["accepted_tokens"] - \
        first[0].section.as_dict()["totals"]["accepted_tokens"]
    assert polled[0].section.as_dict()["latency"]["ttft_s"]["from_buckets"]
    # the mean from the exported sum, as the collector's own histogram has it
    assert polled[0].section.as_dict()["latency"]["ttft_s"]["mean"] == pytest.approx(
        live[0].section.as_dict()["latency"]["ttft_s"]["mean"])


def test_dashboard_reads_an_engines_own_metrics_page(samples):
    """`dashboard --live http://vllm:8000/metrics`: a real vLLM page, served with its counters
    advancing by the page's own values per poll, becomes one run per engine rank with vLLM's
    acceptance and one window per pair of polls."""
    from tests.metrics_pages import scaled, serving

    page = (samples / "vllm_metrics_scrape_specdecode_1.txt").read_text()
    with serving(lambda n: scaled(page, lambda _: n + 1)) as url:
        src = MetricsSource(url)
        src.runs()
        views = src.runs()
    assert len(views) == 1
    v = views[0]
    assert v.run.algorithm == "vllm" and v.run.num_steps == 3 and v.run.model == "MiniMaxAI/MiniMax-M2.5"
    t = v.section.as_dict()["totals"]
    assert (t["num_drafts"], t["draft_tokens"], t["accepted_tokens"]) == (2 * 43680, 2 * 131040, 2 * 58695)
    assert t["mean_acceptance_length"] == pytest.approx(1 + 58695 / 43680)
    assert [round(x, 3) for x in t["per_position_acceptance"]] == [0.665, 0.42, 0.259]
    win = v.section.as_dict()["windows"]
    assert len(win) == 1 and win[0]["accepted_tokens"] == 58695
    # latency from vLLM's own histograms: TTFT, and its inter-token latency as the per-chunk
    # gap (under speculation a chunk is a verify step), never as per-token ITL
    def count_and_sum(family):
        lines = {ln.split("{")[0].split(" ")[0]: float(ln.rsplit(" ", 1)[1]) for ln in page.splitlines()
                 if ln.startswith(family + "_count") or ln.startswith(family + "_sum")}
        return lines[family + "_count"], lines[family + "_sum"]

    lat = v.section.as_dict()["latency"]
    n, total = count_and_sum("vllm:time_to_first_token_seconds")
    assert lat["ttft_s"]["from_buckets"] and lat["ttft_s"]["n"] == n
    assert lat["ttft_s"]["mean"] == pytest.approx(total / n)
    n, _ = count_and_sum("vllm:inter_token_latency_seconds")
    assert lat["itl_chunk_s"]["n"] == n and lat["itl_token_s"]["n"] == 0


def test_accuracy_files_long_wide_and_json(tmp_path):
    long = tmp_path / "long.csv"
    long.write_text("configuration,benchmark,score\nbaseline,gsm8k,0.975\nmtp-3-1-4,gsm8k,0.035\n")
    wide = tmp_path / "wide.csv"
    wide.write_text("benchmark,baseline,mtp-3-1-4\ngsm8k,0.975,0.971\nsimple-qa,0.40,0.31\n")
    js = tmp_path / "acc.json"
    js.write_text(json.dumps({"baseline": {"gsm8k": 0.975}}))
    assert load_accuracy(long) == {"baseline": {"gsm8k": 0.975}, "mtp-3-1-4": {"gsm8k": 0.035}}
    assert load_accuracy(wide)["mtp-3-1-4"] == {"gsm8k": 0.971, "simple-qa": 0.31}
    assert load_accuracy(js) == {"baseline": {"gsm8k": 0.975}}
    bad = tmp_path / "bad.csv"
    bad.write_text("configuration,benchmark,score\nbaseline,gsm8k,0.9\nx,gsm8k,high\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: not a score row"):
        load_accuracy(bad)


def test_basic_auth_guards_every_page(dash_traces):
    app = create_app(TraceSource([dash_traces]), basic_auth=("ops", "s3cret"))
    client = app.server.test_client()
    assert client.get("/").status_code == 401
    assert client.get("/_dash-layout").status_code == 401
    import base64

    good = {"Authorization": "Basic " + base64.b64encode(b"ops:s3cret").decode()}
    wrong = {"Authorization": "Basic " + base64.b64encode(b"ops:nope").decode()}
    assert client.get("/", headers=wrong).status_code == 401
    assert client.get("/", headers=good).status_code == 200


def test_request_records_round_trip_unchanged(dash_traces):
    """The dashboard never rewrites traces: reading them leaves the files as they were."""
    before = (dash_traces / "clean.jsonl").read_bytes()
    TraceSource([dash_traces]).runs()
    assert (dash_traces / "clean.jsonl").read_bytes() == before
    assert any(isinstance(r, schema.RequestRecord) for r in read_trace(dash_traces / "clean.jsonl").records)


def test_a_live_source_reads_what_the_collector_does_not_keep_from_its_traces(dash_traces, tmp_path):
    """make demo's source: live totals from the collector, per-request records and phases from
    the run's own trace (so the Compare page's CDFs and the Requests page fill), and the runs of
    other traces in its directories (a sweep's points) listed beside the live ones."""
    import shutil

    records = read_trace(dash_traces / "faulted.jsonl").records
    collector = Collector()
    collector.observe([r for r in records if getattr(r, "run_id", "") == "faulted-s2"])
    live_dir, sweep_dir = tmp_path / "demo", tmp_path / "demo" / "sweep"
    sweep_dir.mkdir(parents=True)
    shutil.copy(dash_traces / "faulted.jsonl", live_dir)
    plain = LiveSource(collector).runs()
    assert [v.run_id for v in plain] == ["faulted-s2"] and plain[0].records is None
    src = LiveSource(collector, traces=[live_dir, sweep_dir], trace_refresh_s=0)
    views = {v.run_id: v for v in src.runs()}
    assert views["faulted-s2"].section == plain[0].section  # the live figures, unchanged
    sample = views["faulted-s2"].sample()
    assert sample is not None and len(sample.ttft_s) == 16  # per-request latencies, from the trace
    assert set(views) == {"faulted-s2"}
    shutil.copy(dash_traces / "clean.jsonl", sweep_dir)  # a sweep point written later
    assert "clean-s3" in {v.run_id for v in src.runs()}
    assert src.default_runs() == ["faulted-s2"]  # selected at first: the live runs alone
