"""vLLM's families (V1, and V0's where they differ).

V1: ``vllm:spec_decode_num_drafts_total`` (request-steps that drafted), ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total`` (bonus excluded) and ``..._num_accepted_tokens_per_pos_total``
``{position}``, per ``engine`` (data-parallel rank) and ``model_name``; builds that export
``..._num_draft_tokens_per_pos_total{position}`` give the drafts that reached each position,
the per-position denominators when the draft depth varies. ``*_created`` series are
timestamps and never read. Acceptance length is 1 + accepted / drafts, from the drafts counter
(never drafted / k: k may vary per batch size).

V0: ``..._num_emitted_tokens_total`` and no drafts counter; its accepted counter counts every
matching draft token, also after a rejection (not a prefix count), so no rate or length is
derived from it: its own ``..._draft_acceptance_rate`` gauge is kept as reported.

vLLM's inter-token latency is observed per streamed chunk (one per verify step under
speculation): it fills ``itl_chunk_s``, not the per-token ITL.
"""

from . import ACCEPTED, DRAFT_TOKENS, DRAFTS, EMITTED, V0_RATE, EngineMetrics

P = "vllm:spec_decode_"

METRICS = EngineMetrics(
    engine="vllm", source="vllm-metrics",
    counters={P + "num_drafts_total": DRAFTS, P + "num_draft_tokens_total": DRAFT_TOKENS,
              P + "num_accepted_tokens_total": ACCEPTED, P + "num_emitted_tokens_total": EMITTED},
    per_pos=P + "num_accepted_tokens_per_pos_total",
    # where a build exports it: the drafts that reached each position (the depth varies)
    drafted_per_pos=P + "num_draft_tokens_per_pos_total",
    gauges={P + "draft_acceptance_rate": V0_RATE},
    latency={"vllm:time_to_first_token_seconds": "ttft_s",
             "vllm:inter_token_latency_seconds": "itl_chunk_s",
             "vllm:request_time_per_output_token_seconds": "tpot_s",
             "vllm:e2e_request_latency_seconds": "e2e_s"},
    rank_label="engine",
    derivation="acceptance length = 1 + accepted / drafts (vLLM's drafts counter, bonus token "
               "included); rate = accepted / drafted tokens",
)
