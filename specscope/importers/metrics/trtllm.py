"""TensorRT-LLM's families (``trtllm-serve``'s ``/prometheus/metrics``).

``trtllm_spec_decode_num_draft_tokens_total`` / ``..._num_accepted_tokens_total`` accumulate the
iteration stats (accepted draft tokens, bonus excluded): they give the acceptance rate. There is
no drafts counter (``numRequestsWithDraftTokens`` stays in the iteration-stats JSON), so no
acceptance length derives from them: ``trtllm_spec_decode_acceptance_length`` (the last
iteration's figure) is kept as reported. With per-request perf metrics on, finished requests add
``trtllm_spec_decode_drafted_tokens_total`` / ``..._accepted_tokens_total{token_position}``: a
consistent population of their own, from which drafts (position 0's drafted), drafted and
accepted tokens, acceptance length and per-position acceptance all derive; where they exist they
are used for every count. Labels: ``model_name`` and ``engine_type``. The iteration-stats JSON
at ``/metrics`` drains on each read and is never polled here. ``trtllm_spec_decode_draft_overhead``
(draft latency over total latency) is kept as an engine sample; ``trtllm_speculative_config_info``
(value 1) gives the run its depth (``spec_num_tokens``) and method.
"""

from . import ACCEPTED, DRAFT_TOKENS, LENGTH, EngineMetrics

P = "trtllm_spec_decode_"

METRICS = EngineMetrics(
    engine="trtllm", source="trtllm-metrics",
    counters={P + "num_draft_tokens_total": DRAFT_TOKENS, P + "num_accepted_tokens_total": ACCEPTED},
    per_pos=P + "accepted_tokens_total", drafted_per_pos=P + "drafted_tokens_total",
    pos_label="token_position",
    gauges={P + "acceptance_length": LENGTH},
    samples={P + "draft_overhead": "draft_overhead_ratio"},  # draft latency / total latency
    info={"trtllm_speculative_config_info": {"spec_num_tokens": "num_steps",
                                             "spec_method": "spec_method",
                                             "spec_draft_model": "spec_draft_model"}},
    latency={"trtllm_time_to_first_token_seconds": "ttft_s",
             "trtllm_time_per_output_token_seconds": "tpot_s",
             "trtllm_e2e_request_latency_seconds": "e2e_s"},
    derivation="rate = accepted / drafted tokens (iteration counters); acceptance length: the "
               "engine's gauge as reported, or 1 + accepted / drafts from the per-position "
               "counters of finished requests where they exist",
)
