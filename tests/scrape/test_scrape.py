"""``specscope scrape`` against a served copy of a real vLLM /metrics page whose spec-decode
counters advance by the page's own values on every scrape (a server started by the test on
127.0.0.1 and stopped by it): windows are the increases, the first scrape is the baseline, a
counter that drops is a restart, a dead endpoint is counted while the live one goes on."""

from __future__ import annotations

import io

import pytest

from specscope import schema
from specscope.io.trace import read_trace
from specscope.scrape import Endpoint, scrape, targets_from_file
from specscope.serving.harness import free_port
from tests.metrics_pages import scaled, serving



@pytest.fixture
def engine(samples):
    """The n-th page's spec-decode counters are the sample's times 1, 2, 3, 1 (the engine
    restarted), 2, 3, ..."""
    page = (samples / "vllm_metrics_scrape_specdecode_1.txt").read_text()
    factors = [1, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8]
    with serving(lambda n: scaled(page, lambda _: factors[n])) as url:
        yield url


def test_scrape_records_counter_increases_per_window(engine, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    out = tmp_path / "scrape.jsonl"
    seen = []
    res = scrape([engine, dead], out, interval_s=0.05, rounds=5, timeout_s=2.0,
                 on_records=seen.extend, log=io.StringIO())
    tr = read_trace(out)
    runs = [r for r in tr.records if isinstance(r, schema.RunRecord)]
    counts = [r for r in tr.records if isinstance(r, schema.SpecCountsRecord)]
    # the run's record, then again at the restart with its new start: the page gives no process
    # start, so the first is unknown (0) and the restart's is the scrape that saw the reset
    assert len(runs) == 2 and runs[0].run_id.startswith("127.0.0.1:") and runs[0].engine == "vllm"
    assert runs[1].run_id == runs[0].run_id and runs[0].started_ns == 0
    assert runs[1].started_ns == counts[2].t_ns
    assert runs[0].labels["endpoint"] == engine and runs[0].num_steps == 3
    assert runs[0].model == "MiniMaxAI/MiniMax-M2.5"  # the page's model_name label
    # rounds 2..5 give windows; round 4's counters went down (a restart): its window is the
    # new value, which here is one page's worth, like every other window
    assert len(counts) == 4 and all(c.run_id == runs[0].run_id for c in counts)
    for c in counts:
        assert (c.num_drafts, c.num_draft_tokens, c.num_accepted) == (43680, 131040, 58695)
        assert c.accepted_per_pos == (29030, 18342, 11323)
    assert seen == tr.records  # the same records went to the collector
    ep_live, ep_dead = res.endpoints
    assert (ep_live.scrapes, ep_live.failures) == (5, 0)
    assert (ep_dead.scrapes, ep_dead.failures) == (5, 5) and "Connection" in ep_dead.last_error
    assert ep_live.series.restarts == 1


def test_page_cap_and_bad_urls_are_named(engine, tmp_path):
    res = scrape([engine], tmp_path / "s.jsonl", rounds=1, max_bytes=1000, log=io.StringIO())
    assert res.endpoints[0].failures == 1 and "larger than the cap" in res.endpoints[0].last_error
    with pytest.raises(ValueError, match="not an http"):
        scrape(["ftp://x/metrics"], tmp_path / "t.jsonl", rounds=1)


def test_targets_file_in_prometheus_file_discovery_shape(tmp_path):
    f = tmp_path / "targets.json"
    f.write_text('[{"targets": ["10.0.0.1:8000", "10.0.0.2:8000"], "labels": {"job": "vllm", '
                 '"__metrics_path__": "/prom"}}]')
    eps = targets_from_file(f)
    assert [e.url for e in eps] == ["http://10.0.0.1:8000/prom", "http://10.0.0.2:8000/prom"]
    assert eps[0].labels == {"job": "vllm"} and isinstance(eps[0], Endpoint)
    f.write_text('{"targets": []}')
    with pytest.raises(ValueError, match="list of"):
        targets_from_file(f)


def test_scraped_windows_reexport_under_specscopes_names(engine, tmp_path):
    """What --metrics-port serves: the collector fed by the scrape renders the engine's
    increases as specscope_* counters, labelled by the run's configuration."""
    from specscope.collector.service import Collector
    from specscope.exporters.prometheus import render

    collector = Collector()
    scrape([engine], tmp_path / "s.jsonl", interval_s=0.05, rounds=3, on_records=collector.observe,
           log=io.StringIO())
    text = render(collector.snapshot())
    drafted = [ln for ln in text.splitlines() if ln.startswith("specscope_draft_tokens_total{")]
    accepted = [ln for ln in text.splitlines() if ln.startswith("specscope_accepted_tokens_total{")]
    assert len(drafted) == 1 and drafted[0].endswith(" 262080")  # two windows of 131040
    assert accepted[0].endswith(" 117390")


def test_cli_names_an_acceptance_drop_while_scraping(samples, capsys, tmp_path):
    """The CLI runs the detectors on every round: a page whose accepted counters stop growing
    (acceptance falls from 0.45 to ~0) is named on stderr while the scrape goes on."""
    from specscope.cli import main

    page = (samples / "vllm_metrics_scrape_specdecode_1.txt").read_text()

    def page_of(n: int) -> str:  # drafts grow every scrape; accepted stop growing after the 4th
        return scaled(page, lambda name: min(n, 4) if "accepted" in name else n)

    with serving(page_of) as url:
        rc = main(["scrape", url, "--interval", "0.25", "--duration", "6",
                   "-o", str(tmp_path / "drop.jsonl")])
    err = capsys.readouterr().err
    assert rc == 0
    assert "anomaly acceptance_regression" in err and "position_0" in err, err


def test_a_llamacpp_router_page_per_model_is_a_run_per_model(tmp_path):
    """llama.cpp's router serves each model's page at ``/metrics?model=ID`` on one port: each
    is its own run, named and labelled after the model (the page itself names none)."""
    from tests.metrics_pages import llamacpp_page

    # both endpoints are fetched once a round: round r serves (r + 1) times the counts
    with serving(lambda n: llamacpp_page(*(x * (n // 2 + 1) for x in (40, 160, 50)),
                                         per_pos=tuple(x * (n // 2 + 1) for x in (30, 20)))) as url:
        urls = [url + "?model=qwen", url + "?model=llama"]
        out = tmp_path / "router.jsonl"
        scrape(urls, out, interval_s=0.05, rounds=3, log=io.StringIO())
    tr = read_trace(out)
    runs = {r.run_id: r for r in tr.records if isinstance(r, schema.RunRecord)}
    port = url.split(":")[2].split("/")[0]
    assert set(runs) == {f"127.0.0.1:{port}/model=qwen", f"127.0.0.1:{port}/model=llama"}
    assert {r.model for r in runs.values()} == {"qwen", "llama"}
    assert all(r.engine == "llamacpp" for r in runs.values())
    counts = [r for r in tr.records if isinstance(r, schema.SpecCountsRecord)]
    assert len(counts) == 4  # two windows per model after the baseline
    assert {(c.num_drafts, c.num_draft_tokens, c.num_accepted, c.accepted_per_pos) for c in counts} \
        == {(40, 160, 50, (30, 20))}


def _scrape_cli(page_of, tmp_path, *extra):
    from specscope.cli import main

    with serving(page_of) as url:
        rc = main(["scrape", url, "--interval", "0.25", "--duration", "2.5",
                   "-o", str(tmp_path / f"s{len(list(tmp_path.iterdir()))}.jsonl"), *extra])
    return rc


def test_cli_names_acceptance_length_pinned_near_k_plus_1(samples, capsys, tmp_path):
    """A vLLM page (k = 3, its per-position counters) whose accepted counter grows 2.95 per
    draft: acceptance length 3.95 is within 3% of k + 1, the sign of looping output."""
    page = (samples / "vllm_metrics_scrape_specdecode_1.txt").read_text()
    ratio = 2.95 * 43680 / 58695  # the page's accepted tokens per draft made 2.95

    def page_of(n: int) -> str:
        return scaled(page, lambda name: n * ratio if name.startswith(
            "vllm:spec_decode_num_accepted_tokens_total") else n)

    assert _scrape_cli(page_of, tmp_path) == 0
    err = capsys.readouterr().err
    assert "anomaly acceptance_length_near_max" in err and "k + 1 = 4" in err, err
    assert "acceptance_regression" not in err  # steady: nothing fell


def test_cli_flags_a_run_below_its_baseline_trace(samples, capsys, tmp_path):
    """--baseline: a steady run whose acceptance is half the baseline run's is flagged from
    its first windows (its own trailing windows, all alike, flag nothing). A baseline trace of
    two runs needs --baseline-run."""
    page = (samples / "vllm_metrics_scrape_specdecode_1.txt").read_text()
    base = tmp_path / "base.jsonl"
    with serving(lambda n: scaled(page, lambda _: n + 1)) as a, \
            serving(lambda n: scaled(page, lambda _: n + 1)) as b:
        scrape([a, b], base, interval_s=0.05, rounds=3, log=io.StringIO())
    first = a.split("/")[2]

    def half(n: int) -> str:
        return scaled(page, lambda name: n * 0.5 if "accepted" in name else n)

    assert _scrape_cli(half, tmp_path) == 0
    assert "acceptance_regression" not in capsys.readouterr().err
    assert _scrape_cli(half, tmp_path, "--baseline", str(base)) == 2
    assert "2 run(s)" in capsys.readouterr().err
    assert _scrape_cli(half, tmp_path, "--baseline", str(base), "--baseline-run", first) == 0
    err = capsys.readouterr().err
    assert f"baseline: run {first}" in err
    assert "anomaly acceptance_regression" in err and "position_0 0.665 -> 0.332" in err, err


def test_endpoint_names_tell_every_endpoint_apart():
    from specscope.scrape import endpoint_names

    assert endpoint_names(["http://a:8080/metrics?model=qwen", "http://a:8080/metrics?model=llama",
                           "http://b:8000/metrics", "https://b:8000/prometheus/metrics"]) == \
        ["a:8080/model=qwen", "a:8080/model=llama", "b:8000", "b:8000#2"]


def test_the_engines_process_start_is_its_runs_start_and_a_moved_one_a_restart(samples, tmp_path):
    """A page with prometheus_client's ``process_start_time_seconds`` (vLLM's API server): the
    run starts there; the engine restarted between rounds 3 and 4 (its counters reset and its
    process start moved), so round 4 writes the run again with the new start."""
    page = (samples / "vllm_metrics_scrape_specdecode_1.txt").read_text()
    factors = [1, 2, 3, 1, 2]
    starts = [1.79e9, 1.79e9, 1.79e9, 1.79e9 + 7200, 1.79e9 + 7200]

    def page_of(n: int) -> str:
        return (scaled(page, lambda _: factors[n])
                + f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {starts[n]}\n")

    with serving(page_of) as url:
        scrape([url], tmp_path / "s.jsonl", interval_s=0.05, rounds=5, log=io.StringIO())
    runs = read_trace(tmp_path / "s.jsonl").of(schema.RunRecord)
    assert [r.started_ns for r in runs] == [1_790_000_000_000_000_000, 1_790_007_200_000_000_000]
