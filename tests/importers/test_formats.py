"""Every era and variant of the log and metrics formats; bad input; fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope import schema
from specscope.collector.stats import SpecStats
from specscope.importers import PARSERS, detect, import_file
from tests.conftest import FUZZ_EXAMPLES

VLLM_ERAS = """\
INFO 03-01 10:00:00 metrics.py:400] Speculative metrics: Draft acceptance rate: 0.500, System efficiency: 0.400, Number of speculative tokens: 4, Number of accepted tokens: 200, Number of draft tokens: 400, Number of emitted tokens: 300.
INFO 03-01 10:00:05 metrics.py:400] Speculative metrics: Draft acceptance rate: 0.550, System efficiency: 0.450, Number of speculative tokens: 4, Number of accepted tokens: 420, Number of draft tokens: 800, Number of emitted tokens: 640.
INFO 03-01 10:00:06 spec_decode_worker.py:1100] SpecDecodeWorker stage times: average_time_per_proposal_tok_ms=3.41 scoring_time_ms=25.12 verification_time_ms=1.23
(APIServer pid=7) INFO 04-01 10:00:10 [metrics.py:80] SpecDecoding metrics: Draft acceptance rate: nan%, Accepted: 0 tokens, Drafted: 0 tokens
(APIServer pid=7) INFO 04-01 10:00:20 [metrics.py:80] SpecDecoding metrics: Draft acceptance rate: 40.0%, Accepted: 120 tokens, Drafted: 300 tokens
(Worker_TP1 pid=9) INFO 05-01 10:00:30 [metrics.py:90] SpecDecoding metrics: Mean acceptance length: 2.20, Accepted: 120 tokens, Drafted: 300 tokens, Per-position acceptance rate: 0.700, 0.350, 0.150
(APIServer pid=7) INFO 06-01 10:00:40 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 15.00 tokens/s, Drafted throughput: 30.00 tokens/s, Accepted: 150 tokens, Drafted: 300 tokens, Per-position acceptance rate: 0.800, 0.450, 0.250, Avg Draft acceptance rate: 50.0%
(APIServer pid=7) INFO 06-01 10:00:40 [loggers.py:271] Engine 001: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 5.0%, Prefix cache hit rate: 0.0%
random noise: Traceback (most recent call last) ...
(APIServer pid=7) INFO 06-01 10:00:50 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.50, Drafted: 300 tokens
"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_vllm_every_era(tmp_path):
    res = import_file(_write(tmp_path, "vllm.log", VLLM_ERAS))
    assert res.format == "vllm-log"
    counts = [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]
    v0 = [c for c in counts if c.source == "vllm-v0"]
    # committed = emitted tokens: 300 - 100 drafts, then (640 - 300) - 100
    assert [(c.num_accepted, c.num_draft_tokens, c.num_drafts) for c in v0] == [(200, 400, 100), (240, 400, 100)]
    v1 = [c for c in counts if c.source == "vllm-v1"]
    assert [(c.num_accepted, c.num_draft_tokens) for c in v1] == [(0, 0), (120, 300), (120, 300), (150, 300)]
    assert v1[1].num_drafts is None and v1[1].reported_acceptance_rate == pytest.approx(0.4)
    assert v1[2].num_drafts == 100 and v1[2].accepted_per_pos == (70, 35, 15) and v1[2].rank == 1
    assert v1[3].reported_acceptance_rate == pytest.approx(0.5) and v1[3].accepted_per_pos == (80, 45, 25)
    phases = {r.phase: r.duration_ns for r in res.records if isinstance(r, schema.PhaseRecord)}
    assert phases == {"draft_per_token": 3_410_000, "verify_forward": 25_120_000, "verify_sample": 1_230_000}
    (gauge,) = [r for r in res.records if isinstance(r, schema.SampleRecord)]
    assert gauge.rank == 1 and gauge.values["waiting"] == 1 and gauge.values["gpu_kv_cache_usage_pct"] == 5.0
    (problem,) = res.problems
    assert problem.line == 10 and "without 'Accepted" in problem.message
    stats = SpecStats().observe_all(res.records)
    # acceptance length pools only lines that give drafts; the rate pools every counted line
    assert stats.num_drafts == 400 and stats.accepted_tokens == 830


def test_vllm_v0_counter_reset(tmp_path):
    first = VLLM_ERAS.splitlines()[0]
    text = first + "\n" + first.replace("200", "40").replace("400", "80").replace("300", "60") + "\n"
    counts = [r for r in import_file(_write(tmp_path, "v0.log", text)).records
              if isinstance(r, schema.SpecCountsRecord)]
    assert [c.num_accepted for c in counts] == [200, 40]  # went down: a restart


def _v0_line(rate: float, eff: float, k: int, accepted: int, drafted: int, emitted: int) -> str:
    """A V0 ``Speculative metrics`` line as vLLM 0.6's ``spec_decode/metrics.py`` logged it
    (``SpecDecodeWorkerMetrics``: draft_acceptance_rate, system_efficiency,
    num_spec_tokens, accepted_tokens, draft_tokens, emitted_tokens); no real V0 log is kept
    in shared/samples."""
    return (f"INFO 03-01 10:00:00 metrics.py:400] Speculative metrics: Draft acceptance rate: "
            f"{rate:.3f}, System efficiency: {eff:.3f}, Number of speculative tokens: {k}, Number of "
            f"accepted tokens: {accepted}, Number of draft tokens: {drafted}, Number of emitted "
            f"tokens: {emitted}.")


def test_vllm_v0_acceptance_length_comes_from_emitted_tokens(tmp_path):
    """V0 counts every matching draft token, also after a rejection; what the engine committed
    is emitted tokens. 8 speculative tokens, 1,000 steps: 5,400 non-prefix matches but 1,200
    tokens emitted ("System efficiency: 0.133" = 1,200 / (1,000 x 9))."""
    res = import_file(_write(tmp_path, "v0.log", _v0_line(0.55, 0.133, 8, 4400, 8000, 1200) + "\n"))
    (c,) = [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted) == (1000, 8000, 200)
    assert c.reported_acceptance_rate == pytest.approx(0.55)  # V0's own figure, kept as reported
    stats = SpecStats().observe_all(res.records)
    assert stats.mean_acceptance_length == pytest.approx(1.2)  # not (4400 + 1000) / 1000 = 5.4
    assert 1.2 / 9 == pytest.approx(0.133, abs=5e-4)  # the engine's own efficiency agrees


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 8)), min_size=1, max_size=12))
def test_vllm_v0_differenced_windows_sum_to_the_last_cumulative_line(tmp_path_factory, steps):
    """Each interval adds n steps drafting k = 4 tokens, emitting n bonus tokens plus up to 4n
    accepted ones; V0's non-prefix accepted count runs ahead of what was emitted."""
    k, acc, dr, em, lines = 4, 0, 0, 0, []
    for n, extra in steps:
        dr += n * k
        em += n + min(extra * n, k * n)
        acc += min(extra * n, k * n) + n // 2
        lines.append(_v0_line(0.5, 0.5, k, acc, dr, em))
    path = tmp_path_factory.mktemp("v0") / "v0.log"
    path.write_text("\n".join(lines) + "\n")
    counts = [r for r in import_file(path).records if isinstance(r, schema.SpecCountsRecord)]
    assert sum(c.num_drafts for c in counts) == dr // k
    assert sum(c.num_draft_tokens for c in counts) == dr
    assert sum(c.num_accepted + c.num_drafts for c in counts) == em  # committed = emitted


SGLANG = """\
[2025-06-15 10:23:40 TP0] Prefill batch. #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, 
[2025-06-15 10:23:45 TP0] Decode batch. #running-req: 32, #token: 12345, token usage: 0.05, accept len: 2.35, gen throughput (token/s): 1234.56, #queue-req: 0
[2025-06-15 10:23:55 TP1 EP1] Decode batch, #running-req: 30, #full token: 1000, full token usage: 0.10, #swa token: 200, swa token usage: 0.02, accept len: 2.55, accept rate: 0.52, cuda graph: True, gen throughput (token/s): 1300.00, #queue-req: 1, 
Decode batch. #running-req: 1, #token: 10, token usage: 0.00, mamba usage: 0.01, accept len: 3.00, gen throughput (token/s): 50.0, #queue-req: 0, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, 
[2025-06-15 10:24:00 TP0] Decode batch. #running-req: 4, #token: 100, token usage: 0.01, gen throughput (token/s): 99.0, #queue-req: 0
[2025-06-15 10:24:01 TP0] Decode batch.
"""


def test_sglang_variants(tmp_path):
    res = import_file(_write(tmp_path, "sglang.log", SGLANG))
    assert res.format == "sglang-log"
    counts = [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]
    assert [c.reported_mean_acceptance_length for c in counts] == [2.35, 2.55, 3.0]
    assert counts[1].rank == 1 and counts[1].reported_acceptance_rate == 0.52
    assert all(c.num_drafts is None and c.num_accepted is None for c in counts)  # never invented
    samples = [r for r in res.records if isinstance(r, schema.SampleRecord)]
    assert samples[0].values["prefill_new_token"] == 1024
    assert samples[2].values["decode_swa_token"] == 200 and samples[3].values["decode_mamba_usage"] == 0.01
    assert samples[3].values["decode_transfer_req"] == 0 and samples[3].t_ns == 0
    assert [p.line for p in res.problems] == [6]


def test_sglang_lines_without_times_are_windows_in_file_order(tmp_path):
    """A log captured from stdout has no ``[time TPn]`` prefix: each line is still a window."""
    from specscope.collector.report import build_report

    bare = "".join(line.split("] ", 1)[-1] + "\n" for line in SGLANG.splitlines()
                   if "Decode batch" in line and "accept len" in line)
    res = import_file(_write(tmp_path, "stdout.log", bare))
    windows = build_report(res.records)["runs"][0]["windows"]
    assert [w["reported_mean_acceptance_length"] for w in windows] == [2.35, 2.55, 3.0]
    assert [w["index"] for w in windows] == [0, 1, 2] and all(w["time"] is None for w in windows)
    # the lines give no counts: unknown, not 0
    assert all(w["draft_tokens"] is None and w["mean_acceptance_length"] is None for w in windows)


def _prom(drafts, drafted, accepted, per_pos):
    lines = ["# HELP vllm:spec_decode_num_drafts_total Number of drafts.",
             "# TYPE vllm:spec_decode_num_drafts_total counter",
             f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}.0',
             "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
             f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {drafted}.0',
             "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
             f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}.0',
             "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",'
              f'position="{i}"}} {v}.0' for i, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


PROM = _prom(100, 300, 150, (70, 50, 30))


def test_prometheus_series_differenced_with_reset(tmp_path):
    text = ("# TIME 1700000000\n" + PROM + "# TIME 1700000010\n" + _prom(300, 900, 420, (200, 140, 80))
            + "# TIME 1700000020\n" + _prom(10, 30, 15, (7, 5, 3)) + "not a sample line\n")
    res = import_file(_write(tmp_path, "metrics.txt", text))
    assert res.format == "prometheus-text"
    counts = [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]
    assert [(c.num_drafts, c.num_draft_tokens, c.num_accepted) for c in counts] == [
        (100, 300, 150), (200, 600, 270), (10, 30, 15)]
    assert counts[1].accepted_per_pos == (130, 90, 50) and counts[2].accepted_per_pos == (7, 5, 3)
    assert counts[1].t_ns == 1_700_000_010 * 10**9
    assert [p.line for p in res.problems] == [text.count("\n")]


def test_sglang_metrics_gauges(tmp_path):
    text = ("# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name=\"m\"} 2.4\n"
            "# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{model_name=\"m\"} 0.47\n")
    (c,) = [r for r in import_file(_write(tmp_path, "s.txt", text)).records
            if isinstance(r, schema.SpecCountsRecord)]
    assert c.reported_mean_acceptance_length == 2.4 and c.reported_acceptance_rate == 0.47
    assert c.num_accepted is None


def _v0_page(draft: int, accepted: int, emitted: int, rate: float) -> str:
    """A vLLM V0 page: the families V0's Prometheus logger registered (accepted, draft and
    emitted token counters, the acceptance-rate and efficiency gauges; no drafts counter)."""
    lab = '{model_name="m"}'
    return (f"# TYPE vllm:spec_decode_draft_acceptance_rate gauge\n"
            f"vllm:spec_decode_draft_acceptance_rate{lab} {rate}\n"
            f"# TYPE vllm:spec_decode_efficiency gauge\nvllm:spec_decode_efficiency{lab} 0.4\n"
            f"# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
            f"vllm:spec_decode_num_accepted_tokens_total{lab} {accepted}\n"
            f"# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
            f"vllm:spec_decode_num_draft_tokens_total{lab} {draft}\n"
            f"# TYPE vllm:spec_decode_num_emitted_tokens_total counter\n"
            f"vllm:spec_decode_num_emitted_tokens_total{lab} {emitted}\n")


def test_vllm_v0_page_keeps_its_own_rate_and_no_derived_length(tmp_path):
    """V0's accepted counter is not a prefix count: the page's draft tokens and V0's own rate
    are kept, and no acceptance length or rate is derived from the accepted counter."""
    from specscope.collector.stats import SpecStats

    text = _v0_page(300, 200, 260, 0.6667) + _v0_page(900, 420, 700, 0.4667)
    res = import_file(_write(tmp_path, "v0.txt", text))
    counts = [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]
    assert [(c.num_draft_tokens, c.num_accepted, c.source) for c in counts] == [
        (300, None, "vllm-v0-metrics"), (600, None, "vllm-v0-metrics")]
    assert [c.reported_acceptance_rate for c in counts] == [0.6667, 0.4667]
    s = SpecStats().observe_all(res.records)
    assert s.acceptance_rate is None and s.mean_acceptance_length is None
    assert s.draft_tokens_unmatched == 900


def test_unknown_format_names_the_known_ones(tmp_path):
    p = _write(tmp_path, "x.txt", "hello world\n")
    with pytest.raises(ValueError, match="unknown format; specscope imports: aiperf, "):
        detect(p)


def test_cli_reports_skipped_lines_and_keeps_the_rest(tmp_path):
    from tests.conftest import run_cli

    p = _write(tmp_path, "vllm.log", VLLM_ERAS)
    out = run_cli("import", str(p), "-o", str(tmp_path / "t.jsonl"))
    assert out.returncode == 0
    assert "vllm-log" in out.stdout and "1 skipped" in out.stdout
    assert "vllm.log:10:" in out.stderr
    bad = run_cli("import", str(_write(tmp_path, "y.txt", "nothing\n")), "-o", str(tmp_path / "u.jsonl"))
    assert bad.returncode == 2 and "unknown format" in bad.stderr


#: a llama-server log at -lv 5 as this build prints it (start-up, per-step, per-task and drafter
#: lines), and a saved stream of its chat completions
LLAMA_LV5 = """\
0.00.006.191 I srv  llama_server: initializing ...
0.00.700.526 I spec common_specu: adding speculative implementation 'draft-simple'
0.00.700.530 I spec common_specu: - n_max=3, n_min=0, p_min=0.000000
0.00.558.589 I spec common_specu: synthetic acceptance: n_max = 3, mean length = 2.500000, rates = [0.691414, 0.478053, 0.330533]
0.01.323.392 D slot   operator(): id  1 | task 0 | add accepted tokens: sampled=39, ids.size=4, n_draft=3
0.01.395.778 D slot   operator(): id  1 | task 0 | add accepted tokens: sampled=198, ids.size=2, n_draft=3
0.01.473.935 D slot   operator(): id  1 | task 0 | add accepted tokens: sampled=253, ids.size=1, n_draft=2
0.02.011.198 I slot print_timing: id  1 | task 0 |       total time =    1101.43 ms /    85 tokens
0.02.011.212 I slot print_timing: id  1 | task 0 | draft acceptance = 0.50000 (    4 accepted /     8 generated), mean len =  2.33
0.02.011.213 I slot print_timing: id  1 | task 0 |      acc per pos = (0.667, 0.333, 0.333)
0.02.011.254 I spec common_specu: statistics     draft-simple: #calls(b,g,a) =    1      3      3, #gen drafts =      3, #acc drafts =     2, #gen tokens =      8, #acc tokens =     4, #mean acc len = 2.33, #acc rate/pos = (0.667, 0.333, 0.333), dur(b,g,a) = 0.039, 266.004, 0.010 ms
"""
LLAMA_STREAM = (
    'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"4"}}],"id":"chatcmpl-a",'
    '"object":"chat.completion.chunk"}\n\n'
    'data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"id":"chatcmpl-a","object":'
    '"chat.completion.chunk","timings":{"prompt_n":18,"predicted_n":8,"draft_n":6,"draft_n_accepted":5}}'
    '\n\ndata: [DONE]\n\n')


def test_llamacpp_lv5_lines_and_a_saved_stream(tmp_path):
    """Per-step lines give the run's counts and each position's drafts (3, 3, 2: the last step
    ran short); the task's acc-per-pos line is checked against them; a stream's figures come
    from its final chunk."""
    res = import_file(_write(tmp_path, "server.log", LLAMA_LV5))
    assert res.format == "llamacpp-log" and not res.problems
    (c,) = [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted) == (3, 8, 4)
    assert c.accepted_per_pos == (2, 1, 1) and c.drafted_per_pos == (3, 3, 2)
    assert not [t for t in res.identities.values() if t.failed]
    assert {"forced", "varying-k"} <= set(res.traps)
    (run,) = [r for r in res.records if isinstance(r, schema.RunRecord)]
    assert run.algorithm == "draft-simple" and run.num_steps == 3
    res = import_file(_write(tmp_path, "stream.txt", LLAMA_STREAM))
    assert res.format == "llamacpp-responses" and "stream-chunks" in res.traps and not res.problems
    (r,) = [x for x in res.records if isinstance(x, schema.RequestRecord)]
    assert (r.num_draft_tokens, r.num_accepted) == (6, 5)


FUZZ_COUNT = {"n": 0}


@settings(max_examples=FUZZ_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=2000),
                      st.text(max_size=2000).map(lambda t: t.encode("utf-8", "surrogatepass")),
                      st.sampled_from([VLLM_ERAS, SGLANG, PROM, LLAMA_LV5, LLAMA_STREAM]).flatmap(
                          lambda base: st.integers(0, len(base)).map(lambda i: base[:i].encode()))),
       fmt=st.sampled_from(sorted(PARSERS)))
def test_fuzz_no_exception_escapes(tmp_path, data, fmt):
    """Arbitrary bytes into every parser: a result or one clear ValueError, never a crash."""
    FUZZ_COUNT["n"] += 1
    p = tmp_path / "fuzz.bin"
    p.write_bytes(data)
    try:
        res = import_file(p, format=fmt)
    except ValueError as exc:
        assert str(p) in str(exc) or "trace" in str(exc)
        return
    assert isinstance(res.records, list)


def test_fuzz_count_recorded(figure):
    figure(f"fuzz: every importer ({len(PARSERS)} formats)", inputs=FUZZ_COUNT["n"], crashes=0)
    assert FUZZ_COUNT["n"] > 0


SGLANG_BENCH = (
    '{"backend": "sglang", "dataset_name": "random", "request_rate": "inf", "max_concurrency": 16, '
    '"completed": 100, "request_throughput": 3.2, "output_throughput": 812.5, "mean_e2e_latency_ms": '
    '4900.1, "median_e2e_latency_ms": 4800.0, "mean_ttft_ms": 120.5, "median_ttft_ms": 110.0, '
    '"p99_ttft_ms": 300.2, "mean_tpot_ms": 18.1, "median_tpot_ms": 17.9, "p99_tpot_ms": 25.0, '
    '"mean_itl_ms": 40.2, "median_itl_ms": 35.1, "p95_itl_ms": 80.0, "p99_itl_ms": 95.5, '
    '"concurrency": 15.2, "accept_length": 2.41}\n')

SGLANG_CONSOLE = """\
============ Serving Benchmark Result ============
Backend:                                 sglang
Traffic request rate:                    inf
Max request concurrency:                 16
Successful requests:                     100
Benchmark duration (s):                  31.25
Total input tokens:                      102400
Total generated tokens:                  25600
Request throughput (req/s):              3.20
Output token throughput (tok/s):         812.50
Total token throughput (tok/s):          4089.60
Concurrency:                             15.20
Accept length:                           2.41
----------------End-to-End Latency----------------
Mean E2E Latency (ms):                   4900.10
Median E2E Latency (ms):                 4800.00
---------------Time to First Token----------------
Mean TTFT (ms):                          120.50
Median TTFT (ms):                        110.00
P99 TTFT (ms):                           300.20
==================================================
"""


def test_sglang_bench_jsonl_and_console(tmp_path):
    lines = SGLANG_BENCH + SGLANG_BENCH.replace("2.41", "2.60") + "{broken\n"
    res = import_file(_write(tmp_path, "sg.jsonl", lines))
    assert res.format == "sglang-bench"
    benches = [r for r in res.records if isinstance(r, schema.BenchmarkRecord)]
    assert [b.metrics["acceptance_length"] for b in benches] == [2.41, 2.60]
    m = benches[0].metrics
    assert m["ttft_ms_p50"] == 110.0 and m["e2el_ms_mean"] == 4900.1 and m["itl_ms_p95"] == 80.0
    assert [p.line for p in res.problems] == [3]
    con = import_file(_write(tmp_path, "sg.txt", SGLANG_CONSOLE))
    (b,) = [r for r in con.records if isinstance(r, schema.BenchmarkRecord)]
    assert b.source == "sglang-bench" and b.metrics["acceptance_length"] == 2.41
    assert b.metrics["e2el_ms_p50"] == 4800.0 and b.metrics["ttft_ms_p99"] == 300.2
    (c,) = [r for r in con.records if isinstance(r, schema.SpecCountsRecord)]
    assert c.reported_mean_acceptance_length == 2.41 and c.num_accepted is None


def test_gauges_of_different_label_sets_are_separate_runs(tmp_path):
    """Two data-parallel ranks of an SGLang server (SGLang's scheduler metrics carry
    model_name, engine_type and tp/pp/dp rank labels): one run each, never averaged, and the
    engine's acceptance rate kept beside its acceptance length."""
    def line(name, dp, v):
        return (f'sglang:{name}{{engine_type="unified",model_name="m",tp_rank="0",pp_rank="0",'
                f'dp_rank="{dp}"}} {v}\n')
    text = ("# TYPE sglang:spec_accept_length gauge\n" + line("spec_accept_length", 0, 3.2)
            + line("spec_accept_length", 1, 1.4) + "# TYPE sglang:spec_accept_rate gauge\n"
            + line("spec_accept_rate", 0, 0.73) + line("spec_accept_rate", 1, 0.13))
    from specscope.collector.report import build_report

    rep = build_report(import_file(_write(tmp_path, "sg.txt", text)).records)
    got = {s["run"]["run_id"]: (s["totals"]["reported_mean_acceptance_length"],
                                s["totals"]["reported_acceptance_rate"]) for s in rep["runs"]}
    assert got == {"sg/dp_rank=0": (3.2, 0.73), "sg/dp_rank=1": (1.4, 0.13)}


def test_a_vllm_page_without_its_accepted_counter_keeps_the_drafted_counts(tmp_path):
    """The drafts and draft-token counters are known and shown; acceptance length and rate,
    which need the accepted counter, stay null (never 0)."""
    from specscope.collector.report import build_report

    text = ('# TYPE vllm:spec_decode_num_drafts counter\n'
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1000.0\n'
            '# TYPE vllm:spec_decode_num_draft_tokens counter\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 3000.0\n')
    t = build_report(import_file(_write(tmp_path, "vm.txt", text)).records)["totals"]
    assert (t["num_drafts"], t["draft_tokens"]) == (1000, 3000)
    assert t["accepted_tokens"] is None and t["mean_acceptance_length"] is None
    assert t["acceptance_rate"] is None
