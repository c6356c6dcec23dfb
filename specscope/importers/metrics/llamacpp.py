"""llama.cpp server's families (``llama-server --metrics``), where the build exposes them.

Builds since the server's spec-decode counters landed (ggml-org/llama.cpp pull 26389) export,
in vLLM's shape under ``llamacpp:``: ``spec_decode_num_drafts_total`` (verification steps),
``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
``..._num_accepted_tokens_per_pos_total{position}`` (zero-based; absent until the first
speculative request completes). The server adds a request's counts when its generation
finishes, so a window holds the requests that finished in it, not the steps run in it. Older
builds give no spec-decode family and record nothing (the scrape says so). llama.cpp serves no
latency histograms and its page has no model or rank label: one page per model (a router
serves each model's page at ``/metrics?model=ID``, and the scrape names the run after it).
"""

from . import ACCEPTED, DRAFT_TOKENS, DRAFTS, EngineMetrics

P = "llamacpp:spec_decode_"

METRICS = EngineMetrics(
    engine="llamacpp", source="llamacpp-metrics",
    counters={P + "num_drafts_total": DRAFTS, P + "num_draft_tokens_total": DRAFT_TOKENS,
              P + "num_accepted_tokens_total": ACCEPTED},
    per_pos=P + "num_accepted_tokens_per_pos_total",
    model_label="model", by_target=True,  # the page names none: a Prometheus relabel of a
    # router's ?model= gives one
    derivation="acceptance length = 1 + accepted / verification steps (bonus token included); "
               "rate = accepted / drafted tokens",
)
