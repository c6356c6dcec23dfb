"""SGLang's families.

``sglang:spec_accept_length`` and ``sglang:spec_accept_rate`` are gauges over the scheduler's
last logging interval: kept as the engine's figures, per label set, never averaged across label
sets. Where the build has ``sglang:spec_verify_calls_total`` (verify calls summed over finished
requests), counts derive from counter increases: drafts = verify calls, and acceptance length =
generated tokens / verify calls, SGLang's own per-request definition (``completion_tokens /
spec_verify_ct``: the prefill's first token included); accepted = generated - verify calls.
Drafted tokens are not counted, so no rate derives from counters. SGLang's inter-token latency
spreads each chunk's interval over its tokens: it fills the per-token ``itl_token_s``. Builds
that export ``sglang:spec_num_steps`` give the run its draft depth k. ``sglang:spec_cap_length``
(the verification window a confidence schedule chose, bonus slot included) and
``sglang:spec_block_accept_length`` (the uncapped block's acceptance length) are kept as the
engine's samples: a window below k + 1 verifies fewer tokens, so acceptance length reads lower
without a worse draft.

Labels, as SGLang's scheduler and tokenizer register them: the tokenizer's counters and
histograms carry ``model_name`` (the generated-token counter also ``is_streaming``); the
scheduler's gauges add ``engine_type``, ``tp_rank``, ``pp_rank``, ``moe_ep_rank`` (``priority``
with priority scheduling) and, with data-parallel attention, ``dp_rank``. A run is a model and,
for the gauges, a ``dp_rank``: the counters (server-wide) are the model's run, each rank's
gauges a run of their own; the other labels qualify series within a run (TP replicas that
report the same gauge agree, or the figure is unknown).
"""

from . import GENERATED, LENGTH, RATE, STEPS, VERIFY_CALLS, EngineMetrics

METRICS = EngineMetrics(
    engine="sglang", source="sglang-metrics",
    counters={"sglang:spec_verify_calls_total": VERIFY_CALLS,
              "sglang:generation_tokens_total": GENERATED},
    gauges={"sglang:spec_accept_length": LENGTH, "sglang:spec_accept_rate": RATE,
            "sglang:spec_num_steps": STEPS},
    # DSpark's confidence-scheduled verification: the window verified (bonus slot included;
    # 0 with no cap scheduled) and the uncapped whole-block acceptance length, as reported
    samples={"sglang:spec_cap_length": "spec_cap_length",
             "sglang:spec_block_accept_length": "spec_block_accept_length"},
    rank_label="dp_rank", counters_by_rank=False,
    qualifiers=("engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "priority", "is_streaming"),
    latency={"sglang:time_to_first_token_seconds": "ttft_s",
             "sglang:inter_token_latency_seconds": "itl_token_s",
             "sglang:time_per_output_token_seconds": "tpot_s",
             "sglang:e2e_request_latency_seconds": "e2e_s"},
    derivation="acceptance length and rate: SGLang's gauges as reported; with "
               "sglang:spec_verify_calls_total, acceptance length = generated tokens / verify "
               "calls (counter increases, prefill's first token included, as SGLang counts it)",
)
