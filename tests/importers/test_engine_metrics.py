"""Every engine's /metrics families through the one mapping (``importers/metrics``).

TensorRT-LLM and SGLang pages are written by prometheus_client with the metric and label names
their collectors register — the library both engines render with; llama.cpp's page in the line
shape its server prints (``tests/metrics_pages.py`` says where each shape comes from). SGLang's
latency comes from the real scrape in shared/samples."""

from __future__ import annotations

import pytest
from specscope import schema
from specscope.collector.service import LABELS
from specscope.dashboard.promsource import Monotone, parse_text, stats_from_samples
from specscope.importers import import_file, metrics, promtext
from specscope.importers.promtext import Series
from tests.metrics_pages import llamacpp_page, sglang_spec, trtllm_page


def _counts(res) -> list[schema.SpecCountsRecord]:
    return [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]


def test_trtllm_iteration_counters_give_the_rate_and_its_gauge_stays_reported(tmp_path):
    path = tmp_path / "trtllm.txt"
    path.write_text(trtllm_page(3000, 1800, 2.71))
    res = promtext.parse(path, "trt")
    (c,) = _counts(res)
    assert (c.num_draft_tokens, c.num_accepted, c.num_drafts) == (3000, 1800, None)
    assert c.reported_mean_acceptance_length == 2.71 and c.source == "trtllm-metrics"
    assert res.records[-1].engine == "trtllm"  # the run record
    s, _ = stats_from_samples(parse_text(path.read_text()))
    (totals,) = [v for v in s.values()]
    assert totals.acceptance_rate == pytest.approx(0.6)
    assert totals.num_drafts == 0 and totals.mean_acceptance_length is None  # no drafts counter


def test_trtllm_per_position_counters_give_length_and_positions(tmp_path):
    # finished requests: 1000 drafts of 3 positions, prefix acceptance 700, 450, 250
    page = trtllm_page(3100, 1420, 2.4, per_pos=[(1000, 700), (1000, 450), (1000, 250)])
    path = tmp_path / "trtllm.txt"
    path.write_text(page)
    (c,) = _counts(promtext.parse(path, "trt"))
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted) == (1000, 3000, 1400)
    assert c.accepted_per_pos == (700, 450, 250)
    s, _ = stats_from_samples(parse_text(page))
    (st,) = s.values()
    assert st.mean_acceptance_length == pytest.approx(2.4)  # 1 + 1400 / 1000
    assert st.per_position_acceptance == pytest.approx([0.7, 0.45, 0.25])


def test_llamacpp_counters_with_and_without_per_position(tmp_path):
    path = tmp_path / "llamacpp.txt"
    path.write_text(llamacpp_page(400, 1600, 500, per_pos=(300, 120, 60, 20)))
    (c,) = _counts(promtext.parse(path, "l"))
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted) == (400, 1600, 500)
    assert c.accepted_per_pos == (300, 120, 60, 20) and c.source == "llamacpp-metrics"
    s, _ = stats_from_samples(parse_text(path.read_text()))
    (key, st), = s.items()
    assert key[0] == "llamacpp" and key[1] == "4"  # algorithm, depth from the positions
    assert st.mean_acceptance_length == pytest.approx(1 + 500 / 400)
    path.write_text(llamacpp_page(400, 1600, 500))  # a build without per-position counters
    (c,) = _counts(promtext.parse(path, "l"))
    assert c.accepted_per_pos == () and c.num_drafts == 400


def test_sglang_verify_calls_give_the_acceptance_length_beside_its_gauges(tmp_path):
    path = tmp_path / "sglang.txt"
    path.write_text(sglang_spec(1000, 2000, 800, 2.75, 0.6))
    (c,) = _counts(promtext.parse(path, "s"))
    # generated tokens summed over is_streaming, per verify call: 2800 / 1000
    assert (c.num_drafts, c.num_accepted, c.num_draft_tokens) == (1000, 1800, None)
    assert (c.reported_mean_acceptance_length, c.reported_acceptance_rate) == (2.75, 0.6)


def test_sglang_latency_from_the_real_scrape(samples):
    page = (samples / "sglang_metrics_scrape_2.txt").read_text()
    page += sglang_spec(1000, 2000, 800, 2.75, 0.6)
    s, _ = stats_from_samples(parse_text(page))
    (st,) = s.values()
    count = sum(float(x.split()[-1]) for x in page.splitlines()
                if x.startswith("sglang:time_per_output_token_seconds_count"))
    assert st.hists["tpot_s"].count == count > 0 and st.hists["ttft_s"].count > 0
    assert st.hists["e2e_s"].count > 0 and st.hists["itl_token_s"].count == 3 and "itl_chunk_s" not in st.hists


def test_ranks_summed_never_average_gauges():
    page = "\n".join(f'sglang:spec_accept_length{{model_name="m",engine="{r}"}} {v}'
                     for r, v in ((0, 2.0), (1, 3.0)))
    vllm = "\n".join(f'vllm:spec_decode_num_drafts_total{{model_name="m",engine="{r}"}} {100 * (r + 1)}\n'
                     f'vllm:spec_decode_num_draft_tokens_total{{model_name="m",engine="{r}"}} {300 * (r + 1)}\n'
                     f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m",engine="{r}"}} {50 * (r + 1)}'
                     for r in (0, 1))
    apart, _ = stats_from_samples(parse_text(vllm))
    summed, _ = stats_from_samples(parse_text(vllm), sum_ranks=True)
    assert sorted(s.num_drafts for s in apart.values()) == [100, 200]
    (one,) = summed.values()
    assert one.num_drafts == 300 and one.accepted_tokens == 150
    # SGLang's TP replicas (metrics from every scheduler) qualify one run: gauges that
    # disagree give an unknown figure, not their mean; gauges that agree stand
    page = "\n".join(f'sglang:spec_accept_length{{model_name="m",tp_rank="{r}"}} {v}'
                     for r, v in ((0, 2.0), (1, 3.0)))
    (one,) = stats_from_samples(parse_text(page))[0].values()
    assert one.reported_al_n == 0
    (one,) = stats_from_samples(parse_text(page.replace(" 3.0", " 2.0")))[0].values()
    assert one.reported_al_sum == 2.0 and one.reported_al_n == 1


def test_sglang_scheduler_labels_and_data_parallel_ranks(tmp_path):
    """SGLang's scheduler labels its gauges with engine type and tp/pp/expert ranks, its
    tokenizer labels the counters with the model alone: one run, not two. With data-parallel
    attention each rank's gauges are a run of their own beside the server-wide counters, and
    summing ranks leaves the counters' acceptance length and an unknown gauge."""
    path = tmp_path / "sglang.txt"
    path.write_text(sglang_spec(1000, 2000, 800, 2.75, 0.6))
    res = promtext.parse(path, "s")
    (c,) = _counts(res)
    assert (c.num_drafts, c.num_accepted, c.reported_mean_acceptance_length) == (1000, 1800, 2.75)
    assert [r.run_id for r in res.records if isinstance(r, schema.RunRecord)] == ["s"]
    path.write_text(sglang_spec(1000, 2000, 800, None, 0.6, dp_lengths=(3.1, 2.5), steps=3))
    res = promtext.parse(path, "s")
    # the configured depth (spec_num_steps, one per rank, agreeing) is every run's k
    assert {r.num_steps for r in res.records if isinstance(r, schema.RunRecord)} == {3}
    got = {r.run_id: (r.num_drafts, r.reported_mean_acceptance_length) for r in _counts(res)}
    assert got == {"s": (1000, None), "s/dp_rank=0": (None, 3.1), "s/dp_rank=1": (None, 2.5)}
    assert {r.model for r in res.records if isinstance(r, schema.RunRecord)} == \
        {"meta-llama/Llama-3.1-8B-Instruct"}
    apart, _ = stats_from_samples(parse_text(path.read_text()))
    rank = LABELS.index("rank")  # a key: the label values, then the node
    assert sorted((k[rank], s.mean_acceptance_length, s.reported_al_sum) for k, s in apart.items()) == \
        [("", pytest.approx(2.8), 0.0), ("0", None, 3.1), ("1", None, 2.5)]
    (one,) = stats_from_samples(parse_text(path.read_text()), sum_ranks=True)[0].values()
    assert one.mean_acceptance_length == pytest.approx(2.8) and one.reported_al_n == 0


def test_a_series_listed_twice_counts_once():
    series = Series("d")
    name = "vllm:spec_decode_num_drafts_total"
    ((_, rec),) = series.feed([(name, {"engine": "0"}, 10.0), (name, {"engine": "0"}, 10.0)], 0)
    assert rec.num_drafts == 10


def test_one_series_restart_does_not_corrupt_the_sum():
    mono = Monotone()
    a = {"instance": "a"}
    b = {"instance": "b"}
    name = "vllm:spec_decode_num_drafts_total"
    seen = [mono([(name, a, x), (name, b, y)]) for x, y in ((100, 1000), (150, 1100), (20, 1200))]
    sums = [sum(v for _, _, v in snap) for snap in seen]
    assert [s1 - s0 for s0, s1 in zip(sums, sums[1:])] == [150, 120]  # a restarted: +20, b +100


def test_every_family_is_mapped_once():
    seen = [f for m in metrics.ENGINES for f in m.families]
    assert len(seen) == len(set(seen))
    assert all(m.derivation for m in metrics.ENGINES)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_LABELS = st.dictionaries(st.sampled_from(["model_name", "engine", "position", "token_position",
                                           "is_streaming", "instance"]),
                          st.sampled_from(["0", "1", "x", "", "-3", "10"]), max_size=4)
_VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**9).map(float))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(metrics.FAMILIES + ("sglang:spec_num_steps",)),
                                   _LABELS, _VALUES), max_size=12), min_size=1, max_size=4),
       st.booleans())
def test_fuzz_the_mapping_never_raises_and_never_invents_counts(pages, baseline):
    """Arbitrary label sets and values (NaN and infinities too) for every mapped family, page
    after page: no exception, and every count is None or a whole number."""
    series = Series("fuzz", baseline=baseline)
    for t, page in enumerate(pages):
        for _, rec in series.feed(page, t):
            for x in (rec.num_drafts, rec.num_draft_tokens, rec.num_accepted, *rec.accepted_per_pos):
                assert x is None or isinstance(x, int)
    stats_from_samples(pages[-1])


def test_llamacpp_servers_through_prometheus_are_runs_of_their_own():
    """llama.cpp's page names no model: through Prometheus two servers are two runs (by their
    target), and a relabelled ``model`` (a router's ``?model=``) names the run."""
    page = parse_text(llamacpp_page(400, 1600, 500))
    two = [(n, {**labels, "instance": inst}, v) for inst in ("a:8080", "b:8080")
           for n, labels, v in page]
    stats, _ = stats_from_samples(two)
    assert sorted(k[5] for k in stats) == ["a:8080", "b:8080"]  # the model column
    assert all(s.num_drafts == 400 for s in stats.values())
    routed = [(n, {**labels, "instance": "a:8080", "model": m}, v) for m in ("qwen", "llama")
              for n, labels, v in page]
    stats, _ = stats_from_samples(routed)
    assert sorted(k[5] for k in stats) == ["llama", "qwen"]


def test_newer_engine_figures_are_kept_beside_the_counts(tmp_path):
    """SGLang's confidence-scheduled window (``spec_cap_length``, bonus slot included) and its
    uncapped block acceptance length, TensorRT-LLM's draft overhead, are the engine's samples;
    TensorRT-LLM's speculative config info gives the run its depth and method, and never
    becomes a run of its own."""
    from specscope.collector.report import build_report

    path = tmp_path / "sglang.txt"
    path.write_text(sglang_spec(100, 250, 50, 2.9, 0.63, cap=(3.0, 3.4)))
    res = import_file(path)
    samples = [r for r in res.records if isinstance(r, schema.SampleRecord)]
    assert samples and samples[0].values == {"spec_cap_length": 3.0, "spec_block_accept_length": 3.4}
    (section,) = build_report(res.records)["runs"]
    assert section["engine_gauges"]["spec_cap_length"] == 3.0
    path = tmp_path / "trtllm.txt"
    path.write_text(trtllm_page(400, 260, 2.3, overhead=0.18,
                                spec_config={"spec_enabled": "true", "spec_method": "eagle3",
                                             "spec_num_tokens": "3"}))
    res = import_file(path)
    runs = [r for r in res.records if isinstance(r, schema.RunRecord)]
    assert len(runs) == 1 and runs[0].num_steps == 3 and runs[0].labels["spec_method"] == "eagle3"
    (s,) = [r for r in res.records if isinstance(r, schema.SampleRecord)]
    assert s.values == {"draft_overhead_ratio": 0.18}
