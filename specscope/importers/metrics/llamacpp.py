"""llama.cpp server's families (``llama-server --metrics``), where the build exposes them.

Builds that count speculation export ``llamacpp:spec_decode_num_drafts_total`` (verification
steps), ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and, in some builds,
``..._num_accepted_tokens_per_pos_total{position}``: the same shape as vLLM's. Builds without
them give no spec-decode family and record nothing (the scrape says so). llama.cpp serves no
latency histograms; its page has no model or rank label (one server, one model).
"""

from . import ACCEPTED, DRAFT_TOKENS, DRAFTS, EngineMetrics

P = "llamacpp:spec_decode_"

METRICS = EngineMetrics(
    engine="llamacpp", source="llamacpp-metrics",
    counters={P + "num_drafts_total": DRAFTS, P + "num_draft_tokens_total": DRAFT_TOKENS,
              P + "num_accepted_tokens_total": ACCEPTED},
    per_pos=P + "num_accepted_tokens_per_pos_total",
    model_label="",
    derivation="acceptance length = 1 + accepted / verification steps (bonus token included); "
               "rate = accepted / drafted tokens",
)
