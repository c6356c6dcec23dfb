"""Per-request spec-decode figures from every engine, V1 lines with a varying draft depth, and
``specscope check``.

shared/samples holds no real per-request response of vLLM, SGLang, llama.cpp or TensorRT-LLM,
so each input below is built from the engine's own source or documentation, named at each.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope import schema
from specscope.collector.stats import SpecStats
from specscope.importers import PARSERS, detect, import_file
from specscope.importers.check import check_file
from tests.conftest import FUZZ_EXAMPLES, run_cli


def _write(tmp_path, name, objs, jsonl=True):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(o) for o in objs) + "\n" if jsonl else json.dumps(objs))
    return p


def _requests(res):
    return [r for r in res.records if isinstance(r, schema.RequestRecord)]


# vLLM PR #48915 (`--per-request-spec-decode-metrics summary`): top-level
# metrics.speculative_decoding with a dense histogram, index j = steps that accepted j drafts.
VLLM_TOP = {"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 54},
            "metrics": {"speculative_decoding": {
                "mean_acceptance_length": 1.2325581395348837, "draft_acceptance_rate": 0.07751937984496124,
                "acceptance_histogram": [39, 1, 0, 3], "num_spec_steps": 43,
                "num_accepted_draft_tokens": 10, "num_draft_tokens": 129, "num_spec_tokens": 3}}}


def _vllm_choice(steps, accepted, hist, rates):
    """vLLM PR #47322 (``stats_reporting_level``): per-choice speculative_decoding_stats with a
    sparse {"j": count} histogram and the detailed per-step arrays."""
    per_step = [j for j, n in sorted(hist.items(), key=lambda kv: int(kv[0])) for _ in range(n)]
    k = len(rates)
    return {"id": f"cmpl-{steps}", "usage": {"prompt_tokens": 5, "completion_tokens": steps + accepted},
            "choices": [{"index": 0, "finish_reason": "length", "speculative_decoding_stats": {
                "num_drafted_tokens": steps * k, "num_accepted_tokens": accepted,
                "draft_acceptance_rate": accepted / (steps * k), "num_draft_steps": steps,
                "mean_accepted_length_per_step": 1 + accepted / steps,
                "per_position_acceptance_rates": rates, "acceptance_histogram": hist,
                "per_step_accepted": [int(j) for j in per_step], "per_step_drafted": [k] * steps}}]}


def test_vllm_responses_in_both_shapes(tmp_path):
    choice = _vllm_choice(250, 413, {"0": 27, "1": 33, "2": 190}, [0.892, 0.76])
    p = _write(tmp_path, "vllm.jsonl", [VLLM_TOP, choice])
    assert detect(p) == "vllm-responses"
    res = import_file(p)
    a, b = _requests(res)
    assert (a.num_verify_steps, a.num_draft_tokens, a.num_accepted) == (43, 129, 10)
    assert a.accept_len_hist == (0, 39, 1, 0, 3)  # re-indexed by tokens committed
    assert a.acceptance_length == pytest.approx(1.2325581395348837)
    assert (b.num_verify_steps, b.num_accepted, b.accept_len_hist) == (250, 413, (0, 27, 33, 190))
    assert not [t for t in res.identities.values() if t.failed]
    (pooled,) = [c for c in res.records if isinstance(c, schema.SpecCountsRecord)]
    assert (pooled.num_drafts, pooled.num_draft_tokens, pooled.num_accepted) == (293, 629, 423)
    stats = SpecStats().observe_all(res.records)
    assert stats.mean_acceptance_length == pytest.approx(1 + 423 / 293)  # token-weighted, pooled
    assert "vllm-structured-output" in res.traps


def test_a_doctored_histogram_fails_the_check_with_its_line(tmp_path):
    bad = json.loads(json.dumps(VLLM_TOP))
    bad["metrics"]["speculative_decoding"]["acceptance_histogram"] = [39, 1, 1, 3]
    p = _write(tmp_path, "doctored.jsonl", [VLLM_TOP, bad])
    result = check_file(p)
    assert not result.ok
    failed = {t.name: t for t in result.identities if t.failed}
    assert failed["histogram sum = verify steps"].failed == 1
    assert failed["histogram sum = verify steps"].first_failures[0].endswith("doctored.jsonl:2: 44 vs 43")
    out = run_cli("check", str(p))
    assert out.returncode == 1 and "FAILS  histogram sum = verify steps" in out.stdout
    clean = run_cli("check", str(_write(tmp_path, "clean.jsonl", [VLLM_TOP])))
    assert clean.returncode == 0 and "FAILS" not in clean.stdout, clean.stdout


# SGLang: /generate's meta_info (tokenizer_manager: spec_verify_ct, spec_accept_length =
# completion_tokens / spec_verify_ct, spec_accept_rate, spec_accept_histogram indexed by accepted
# drafts) and the OpenAI route's sglext.spec_tokens_details.
SGLANG_NATIVE = {"text": "...", "meta_info": {
    "id": "r1", "prompt_tokens": 30, "completion_tokens": 12, "e2e_latency": 0.75,
    "finish_reason": {"type": "stop"}, "spec_verify_ct": 4, "spec_num_correct_drafts": 7,
    "spec_num_proposed_drafts": 12, "spec_accept_length": 3.0, "spec_accept_rate": 7 / 12,
    "spec_accept_histogram": [1, 0, 1, 2]}}
SGLANG_OPENAI = {"id": "chatcmpl-9", "choices": [{"index": 0, "message": {"content": "x"}}],
                 "usage": {"prompt_tokens": 7, "completion_tokens": 9},
                 "sglext": {"spec_tokens_details": {
                     "spec_num_correct_drafts": 5, "spec_num_proposed_drafts": 9, "spec_verify_ct": 3,
                     "spec_correct_drafts_histogram": [0, 1, 2, 0]}}}


def test_sglang_meta_info_and_sglext(tmp_path):
    p = _write(tmp_path, "sglang.json", [SGLANG_NATIVE, SGLANG_OPENAI], jsonl=False)
    assert detect(p) == "sglang-responses"
    res = import_file(p)
    a, b = _requests(res)
    assert (a.request_id, a.num_verify_steps, a.num_accepted, a.num_draft_tokens) == ("r1", 4, 7, 12)
    assert a.acceptance_length == pytest.approx(1 + 7 / 4)  # 2.75, not SGLang's 12 / 4 = 3.0
    assert a.e2e_s == pytest.approx(0.75) and a.ttft_s is None
    assert (b.num_verify_steps, b.num_accepted, b.accept_len_hist) == (3, 5, (0, 0, 1, 2, 0))
    assert "sglang-request-al" in res.traps
    assert res.identities["SGLang spec_accept_length = completion tokens / verify steps"].failed == 0


@pytest.mark.parametrize("name,obj,expect", [
    # `jq .timings` of a llama.cpp response: the timings object alone
    ("timings.json", {"prompt_n": 9, "predicted_n": 30, "predicted_ms": 300.0, "draft_n": 24,
                      "draft_n_accepted": 17}, ("llamacpp-responses", None, 24, 17)),
    # one choice of a vLLM response, and its stats object alone
    ("choice.json", _vllm_choice(250, 413, {"0": 27, "1": 33, "2": 190}, [0.892, 0.76])["choices"][0],
     ("vllm-responses", 250, 500, 413)),
    ("stats.json", _vllm_choice(250, 413, {"0": 27, "1": 33, "2": 190}, [0.892, 0.76])
     ["choices"][0]["speculative_decoding_stats"], ("vllm-responses", 250, 500, 413)),
    # SGLang's spec details as `sglext.spec_tokens_details` holds them
    ("details.json", SGLANG_OPENAI["sglext"]["spec_tokens_details"], ("sglang-responses", 3, 9, 5)),
])
def test_a_spec_object_on_its_own_imports_and_says_where_it_sits(tmp_path, name, obj, expect):
    fmt, steps, drafted, accepted = expect
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    assert detect(p) == fmt
    res = import_file(p)
    (r,) = _requests(res)
    assert (r.num_verify_steps, r.num_draft_tokens, r.num_accepted) == (steps, drafted, accepted)
    assert str(p) in res.traps["bare-object"] and not res.problems


def test_llamacpp_timings_and_trtllm_perf_metrics(tmp_path):
    # llama.cpp server PR #12603: timings.draft_n / draft_n_accepted (no verify steps)
    llama = {"id": "chatcmpl-x", "usage": {"prompt_tokens": 1, "completion_tokens": 200},
             "timings": {"prompt_n": 1, "prompt_ms": 228.5, "predicted_n": 200, "predicted_ms": 11082.6,
                         "draft_n": 347, "draft_n_accepted": 65}}
    res = import_file(_write(tmp_path, "llama.jsonl", [llama]))
    assert res.format == "llamacpp-responses"
    (r,) = _requests(res)
    assert (r.num_draft_tokens, r.num_accepted, r.num_verify_steps) == (347, 65, None)
    assert r.acceptance_length is None and "llamacpp-no-steps" in res.traps
    # TensorRT-LLM serve perf metrics (request_id, perf_metrics.timing_metrics in seconds,
    # perf_metrics.speculative_decoding: acceptance_rate, total_accepted_draft_tokens, total_draft_tokens)
    trt = [{"request_id": 3, "perf_metrics": {
        "first_iter": 10, "last_iter": 40,
        "timing_metrics": {"arrival_time": 100.0, "first_scheduled_time": 100.01,
                           "first_token_time": 100.05, "last_token_time": 101.05},
        "speculative_decoding": {"acceptance_rate": 0.5, "total_accepted_draft_tokens": 45,
                                 "total_draft_tokens": 90}}}]
    res = import_file(_write(tmp_path, "trt.json", trt, jsonl=False))
    assert res.format == "trtllm-requests"
    (r,) = _requests(res)
    assert (r.num_draft_tokens, r.num_accepted) == (90, 45)
    assert r.ttft_s == pytest.approx(0.05) and r.e2e_s == pytest.approx(1.05)


def test_trtllm_iteration_stats(tmp_path):
    """``LLM.get_stats()`` / trtllm-serve ``/metrics``: a list of iterations, entries possibly
    JSON strings; acceptanceLength is 0.0 on iterations without drafts (unknown here)."""
    its = [{"iter": 1, "iterLatencyMS": 50.0, "numActiveRequests": 8,
            "specDecodingStats": {"numDraftTokens": 0, "numAcceptedTokens": 0,
                                  "numRequestsWithDraftTokens": 0, "acceptanceLength": 0.0}},
           json.dumps({"iter": 2, "iterLatencyMS": 20.0, "numActiveRequests": 8,
                       "specDecodingStats": {"numDraftTokens": 24, "numAcceptedTokens": 12,
                                             "numRequestsWithDraftTokens": 8, "acceptanceLength": 2.5}})]
    p = _write(tmp_path, "iters.json", its, jsonl=False)
    res = import_file(p, format="trtllm-iteration-stats")
    c = [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]
    assert [x.reported_mean_acceptance_length for x in c] == [None, 2.5]
    assert SpecStats().observe_all(res.records).mean_acceptance_length == pytest.approx(2.5)
    assert "trtllm-drained" in res.traps and not res.problems


def test_a_json_list_whose_first_response_drafted_nothing_still_imports(tmp_path):
    """llama.cpp's /v1/completions responses saved as one JSON list: a response that drafted
    nothing carries timings without draft_n; the list is still llama.cpp's, and that request's
    counts stay unknown rather than 0."""
    import json

    plain = {"id": "cmpl-0", "choices": [{"text": "4", "index": 0}],
             "timings": {"prompt_n": 9, "predicted_n": 1, "predicted_ms": 20.0}}
    drafted = {"id": "cmpl-1", "choices": [{"text": "a b c", "index": 0}],
               "timings": {"prompt_n": 9, "predicted_n": 30, "predicted_ms": 300.0,
                           "draft_n": 24, "draft_n_accepted": 17}}
    p = tmp_path / "completions.json"
    p.write_text(json.dumps([plain, drafted]))
    res = import_file(p)
    assert res.format == "llamacpp-responses"
    by_id = {r.request_id: r for r in _requests(res)}
    assert (by_id["cmpl-1"].num_draft_tokens, by_id["cmpl-1"].num_accepted) == (24, 17)
    assert by_id["cmpl-0"].num_draft_tokens is None


def test_llamacpp_newer_request_line_derives_steps_only_where_exact(tmp_path):
    """llama.cpp PR #24536's print_timing line: 167 accepted at mean length 2.92 fits only 87
    steps; its per-position rates already sum to accepted / steps (not multiplied again)."""
    text = ("0.06.896.015 I slot print_timing: id  1 | task 0 | draft acceptance = 0.64479 (  167 "
            "accepted /   259 generated), mean acceptance length =  2.92, acceptance rate per position "
            "= (0.805, 0.632, 0.483)\n"
            "0.06.896.057 I statistics     draft-eagle3: #calls(b,g,a) =    1     87     87, #gen drafts "
            "=     87, #acc drafts =    70, #gen tokens =    259, #acc tokens =   167, #mean acc len = "
            "2.92, #acc rate/pos = (0.805, 0.632, 0.483), dur(b,g,a) = 0.005, 325.555, 0.114 ms\n")
    p = tmp_path / "llama.log"
    p.write_text(text)
    res = import_file(p)
    (r,) = _requests(res)
    assert (r.request_id, r.rank, r.num_verify_steps) == ("task-0", 1, 87)
    (c,) = [x for x in res.records if isinstance(x, schema.SpecCountsRecord)]
    assert (c.num_drafts, c.num_accepted) == (87, 167)
    assert not [t for t in res.identities.values() if t.failed]


def test_vllm_v1_varying_depth_takes_drafts_from_the_line(tmp_path):
    """Per-batch-size k: 100 drafts at k=3 and 50 at k=1 give 350 drafted tokens; 300 / 3 would
    say 116 drafts. The line's mean acceptance length (1 + 180 / 150 = 2.20) fixes 150."""
    line = ("(APIServer pid=7) INFO 06-01 10:00:40 [metrics.py:101] SpecDecoding metrics: Mean acceptance "
            "length: 2.20, Accepted throughput: 18.00 tokens/s, Drafted throughput: 35.00 tokens/s, "
            "Accepted: 180 tokens, Drafted: 350 tokens, Per-position acceptance rate: 0.800, 0.250, 0.150, "
            "Avg Draft acceptance rate: 51.4%\n")
    p = tmp_path / "v1.log"
    p.write_text(line)
    res = import_file(p)
    (c,) = [x for x in res.records if isinstance(x, schema.SpecCountsRecord)]
    assert c.num_drafts == 150 and "varying-k" in res.traps
    # field order of another release, no Avg suffix, fixed k: drafts = drafted / k, confirmed
    p.write_text("INFO 05-01 10:00:30 [metrics.py:90] SpecDecoding metrics: Accepted: 120 tokens, "
                 "Drafted: 300 tokens, Mean acceptance length: 2.20, Per-position acceptance rate: "
                 "0.700, 0.350, 0.150\n")
    res = import_file(p)
    (c,) = [x for x in res.records if isinstance(x, schema.SpecCountsRecord)]
    assert c.num_drafts == 100 and c.accepted_per_pos == (70, 35, 15) and "varying-k" not in res.traps


def test_vllm_v1_log_whose_drafts_cannot_all_be_derived_gives_null_drafts_and_length(tmp_path):
    """n-gram drafts vary in length: the second interval (13 drafted, none accepted, 1.00) fixes
    no number of drafts, so the run's drafts and acceptance length are unknown, not 1 + all 5
    accepted tokens over the first interval's 6 drafts."""
    from specscope.collector.report import build_report

    def line(t, al, acc, dr, pp, rate):
        return (f"(APIServer pid=7) INFO 12-02 09:46:{t} [metrics.py:120] SpecDecoding metrics: "
                f"Mean acceptance length: {al}, Accepted throughput: 1.00 tokens/s, Drafted "
                f"throughput: 2.00 tokens/s, Accepted: {acc} tokens, Drafted: {dr} tokens, "
                f"Per-position acceptance rate: {pp}, Avg Draft acceptance rate: {rate}%\n")

    p = tmp_path / "server.log"
    p.write_text(line(12, "1.83", 5, 18, "0.833, 0.000, 0.000", "27.8")
                 + line(14, "1.00", 0, 13, "0.000, 0.000, 0.000", "0.0"))
    totals = build_report(import_file(p).records)["totals"]
    assert totals["draft_tokens"] == 31 and totals["accepted_tokens"] == 5
    assert totals["num_drafts"] is None and totals["mean_acceptance_length"] is None
    assert totals["acceptance_rate"] == 5 / 31


def test_check_names_the_v0_trap(tmp_path):
    from tests.importers.test_formats import _v0_line

    p = tmp_path / "v0.log"
    p.write_text(_v0_line(0.55, 0.133, 8, 4400, 8000, 1200) + "\n")
    out = run_cli("check", str(p))
    assert out.returncode == 1, out.stdout
    assert "FAILS  accepted tokens = emitted - drafts (a prefix count; V0's is not)" in out.stdout
    assert "worst by 4200" in out.stdout and "trap   vllm-v0-accepted" in out.stdout
    assert "holds  system efficiency" in out.stdout
    imp = run_cli("import", str(p), "-o", str(tmp_path / "t.jsonl"))
    assert imp.returncode == 0 and "trap vllm-v0-accepted" in imp.stderr


def test_aiperf_records_with_spec_decode_metrics(tmp_path):
    """AIPerf's spec_decode_metrics.py record metrics (spec_decode_steps, _draft_tokens,
    _accepted_draft_tokens, _acceptance_length, _draft_acceptance_rate in percent)."""
    def rec(i, steps, drafted, accepted):
        return {"metadata": {"x_request_id": f"r{i}", "request_start_ns": 1_000_000_000,
                             "request_end_ns": 3_000_000_000},
                "metrics": {"output_sequence_length": {"value": steps + accepted, "unit": "tokens"},
                            "spec_decode_steps": {"value": steps, "unit": "count"},
                            "spec_decode_draft_tokens": {"value": drafted, "unit": "tokens"},
                            "spec_decode_accepted_draft_tokens": {"value": accepted, "unit": "tokens"},
                            "spec_decode_acceptance_length": {"value": 1 + accepted / steps, "unit": "ratio"},
                            "spec_decode_draft_acceptance_rate": {"value": 100 * accepted / drafted,
                                                                  "unit": "%"}}}
    p = _write(tmp_path, "profile_export.jsonl", [rec(0, 10, 30, 20), rec(1, 40, 120, 8)])
    res = import_file(p)
    assert res.format == "aiperf-records"
    reqs = _requests(res)
    assert [r.acceptance_length for r in reqs] == [3.0, 1.2]
    assert reqs[0].ttft_s is None  # no time_to_first_token: unknown, not 0 and not E2E
    stats = SpecStats().observe_all(res.records)
    assert stats.mean_acceptance_length == pytest.approx(1 + 28 / 50)  # token-weighted 1.56, not 2.1
    assert "request-vs-token-weighted" in check_file(p).traps


def test_a_histogram_key_no_engine_could_write_is_a_problem_not_a_huge_list(tmp_path):
    """A sparse histogram key of 10**12 (a corrupt file) would allocate a 10**12-entry list."""
    bad = _vllm_choice(10, 5, {"1000000000000": 1}, [0.5])
    res = import_file(_write(tmp_path, "bad.jsonl", [bad, VLLM_TOP]))
    assert len(res.problems) == 1 and "histogram with a bad entry" in res.problems[0].message
    assert res.problems[0].line == 1 and len(_requests(res)) == 1  # the good line is kept


BASES = [json.dumps(VLLM_TOP), json.dumps(SGLANG_NATIVE), json.dumps(SGLANG_OPENAI),
         "draft acceptance = 0.64479 (  167 accepted /   259 generated), mean acceptance length =  2.92\n"
         "statistics draft: #calls = 10, #gen drafts = 10, #acc drafts = 10, #gen tokens = 110, #acc tokens = 98\n"
         "n_drafted = 10\nn_accept  = 5\naccept    = 50.000%\n",
         '{"question_id": 1, "category": "math", "choices": [{"decoding_steps": [2], "new_tokens": [5], '
         '"wall_time": [0.1], "accept_lengths": [3, 2]}], "tstamp": 1.0}']


@settings(max_examples=FUZZ_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.sampled_from(BASES).flatmap(
           lambda base: st.tuples(st.integers(0, len(base)), st.text(max_size=20)).map(
               lambda cut: (base[:cut[0]] + cut[1] + base[cut[0]:]).encode("utf-8", "surrogatepass"))),
       fmt=st.sampled_from(sorted(f for f in PARSERS if f.endswith(("responses", "requests", "stats"))
                                  or f in ("llamacpp-log", "specbench"))))
def test_fuzz_new_parsers(tmp_path, data, fmt):
    """Cut and spliced real shapes into every new parser: a result with per-line problems, or one
    clear ValueError naming the file; never a crash."""
    p = tmp_path / "fuzz.txt"
    p.write_bytes(data)
    try:
        res = import_file(p, format=fmt)
    except ValueError as exc:
        assert str(p) in str(exc)
        return
    for problem in res.problems:
        assert problem.file == str(p) and problem.line >= 1


def test_varying_depth_keeps_the_drafts_that_reached_each_position(tmp_path):
    """vLLM's detailed per-request figures with a depth that varies step by step (n-gram: 3, 1,
    2, 3): each position's rate is over the steps that drafted it, not over every step."""
    import json

    from specscope.collector.report import build_report

    choice = {"index": 0, "finish_reason": "length", "speculative_decoding_stats": {
        "num_draft_steps": 4, "num_drafted_tokens": 9, "num_accepted_tokens": 5,
        "per_step_accepted": [3, 0, 1, 1], "per_step_drafted": [3, 1, 2, 3]}}
    p = tmp_path / "responses.json"
    p.write_text(json.dumps([{"id": "r0", "choices": [choice], "usage": {"completion_tokens": 9}}]))
    res = import_file(p)
    (c,) = [x for x in res.records if isinstance(x, schema.SpecCountsRecord)]
    assert c.accepted_per_pos == (3, 1, 1) and c.drafted_per_pos == (4, 3, 2)
    assert "varying-k" in res.traps
    (section,) = build_report(res.records)["runs"]
    assert section["totals"]["per_position_acceptance"] == pytest.approx([3 / 4, 1 / 3, 1 / 2])


def test_a_vllm_page_with_drafted_per_position_counters_uses_them(tmp_path):
    """Builds that export ``vllm:spec_decode_num_draft_tokens_per_pos_total`` give each
    position's drafts; per-position acceptance divides by them."""
    from specscope.collector.report import build_report

    def page(scale):
        lines = [f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {100 * scale}',
                 f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {240 * scale}',
                 f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {150 * scale}']
        for pos, (a, d) in enumerate([(80, 100), (50, 80), (20, 60)]):
            lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",'
                         f'position="{pos}"}} {a * scale}')
            lines.append(f'vllm:spec_decode_num_draft_tokens_per_pos_total{{engine="0",model_name="m",'
                         f'position="{pos}"}} {d * scale}')
        return "\n".join(lines) + "\n"

    p = tmp_path / "metrics.txt"
    p.write_text(page(1))
    res = import_file(p)
    counts = [x for x in res.records if isinstance(x, schema.SpecCountsRecord) and x.num_drafts]
    assert counts and counts[-1].drafted_per_pos == (100, 80, 60)
    (section,) = build_report(res.records)["runs"]
    assert section["totals"]["per_position_acceptance"] == pytest.approx([0.8, 50 / 80, 20 / 60])


def test_vllm_logprobs_as_token_ids_give_tokens_and_top2_margins(tmp_path):
    """A vLLM chat response with ``return_tokens_as_token_ids`` and ``top_logprobs``: its output
    tokens and each token's top-1 minus top-2 log-probability, whether or not it carries
    speculative figures (a target-only server's responses are diverge's reference)."""
    import json

    content = [{"token": "token_id:5", "logprob": -0.1, "top_logprobs": [
                   {"token": "token_id:5", "logprob": -0.1}, {"token": "token_id:9", "logprob": -2.6}]},
               {"token": "token_id:7", "logprob": -0.7, "top_logprobs": [
                   {"token": "token_id:3", "logprob": -0.6}, {"token": "token_id:7", "logprob": -0.7}]}]
    plain = {"id": "c0", "choices": [{"index": 0, "finish_reason": "length", "message": {"content": "x"},
                                      "logprobs": {"content": content}}], "usage": {"completion_tokens": 2}}
    p = tmp_path / "ref.json"
    p.write_text(json.dumps([plain]))
    res = import_file(p)
    assert res.format == "vllm-responses"
    (r,) = _requests(res)
    assert r.output_token_ids == (5, 7) and r.second_token_ids == (9, 7)
    assert r.top2_margins == pytest.approx((2.5, 0.1))
    spec = dict(plain, metrics={"speculative_decoding": {"num_spec_steps": 1, "num_draft_tokens": 3,
                                                         "num_accepted_draft_tokens": 1}})
    p.write_text(json.dumps([spec]))
    (r,) = _requests(import_file(p))  # one request, with its figures and its tokens
    assert r.num_verify_steps == 1 and r.output_token_ids == (5, 7)
