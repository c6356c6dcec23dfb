"""The engines specscope knows, in one place: each part's table about an engine (its sampling
defaults, its title in rule files and the ``--engine`` choices, its log importer's format, its
server harness's speculation syntax, how the probe reads its log-probabilities, tells it from
``/v1/models`` and which classes it sends) is read from here. Stdlib only, imports nothing of
specscope.

Adding an engine is the checklist in ``docs/architecture.md`` ("Adding an engine"): one entry
here, its metric families in ``importers/metrics/<name>.py``, its log importer (if it has one)
in ``importers/``, its server in ``serving/`` (if sweeps and tests start it), and its page in
``docs/engines/``. ``tests/test_registry.py`` holds every table to this one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """One inference engine: what every part needs to know about it."""

    name: str  #: every table's key ("vllm", ...); the runs' ``algorithm`` when read from its metrics
    title: str  #: as people write it ("vLLM"): rule files, dashboards, messages
    #: what a request that leaves a parameter out gets: (temperature, top_p, top_k, min_p);
    #: None where specscope never classifies its requests (no hooks, no probe semantics)
    sampling_defaults: tuple[float, float, int, float] | None = None
    #: the word ``/v1/models``' ``owned_by`` carries on this engine's server ("" : none)
    owned_by: str = ""
    #: its log importer's format name (``importers.FORMATS``); "" where it has none
    log_format: str = ""
    #: what its server takes as a speculation setting; "" where specscope starts no server
    spec_syntax: str = ""
    #: what it needs to return log-probabilities (the probe's error says it)
    logprobs_enable: str = ""
    #: its log-probabilities' reading unless told otherwise: "raw", "tempered" or "processed"
    logprobs_default: str = "raw"
    #: whether its log-probabilities carry its penalties whatever the mode
    logprobs_penalised: bool = False
    #: why the probe cannot score its penalties ("": it can)
    penalty_window: str = ""
    #: whether its OpenAI responses name tokens by id (``return_tokens_as_token_ids``)
    token_ids: bool = False
    #: whether its sampler truncates (top-k, top-p, min-p) before it applies the temperature
    truncation_first: bool = False
    #: whether a seeded request's draws repeat (the probe's seed class is sent only then)
    seeds_repeat: bool = False
    #: whether its OpenAI server takes ``min_tokens`` and ``stop_token_ids`` (the probe's stops
    #: class sends them only then: a server that ignores them would read as a fault)
    takes_stop_fields: bool = False

    @property
    def truncates_by_default(self) -> bool:
        """Whether a request that leaves top-k, top-p and min-p out is truncated anyway."""
        d = self.sampling_defaults
        return d is not None and (d[1] < 1.0 or 0 < d[2] < TOP_K_ALL or d[3] > 0.0)


#: SGLang's "top_k off" after it normalises a request (``sampling_params.TOP_K_ALL``: the
#: whole vocabulary)
TOP_K_ALL = 1 << 30

ENGINES: tuple[Engine, ...] = (
    Engine(
        "vllm", "vLLM", (1.0, 1.0, 0, 0.0), owned_by="vllm", log_format="vllm-log",
        spec_syntax='a --speculative-config JSON, e.g. \'{"method": "ngram", '
                    '"num_speculative_tokens": 4}\'',
        logprobs_enable="vLLM returns them unless started with --max-logprobs 0 (raise "
                        "--max-logprobs for more alternatives; --logprobs-mode says raw or "
                        "processed)",
        token_ids=True, seeds_repeat=True, takes_stop_fields=True),
    Engine(
        "sglang", "SGLang", (1.0, 1.0, TOP_K_ALL, 0.0), owned_by="sglang",
        log_format="sglang-log",
        spec_syntax="METHOD:STEPS/TOPK/DRAFT_TOKENS (STANDALONE:3/1/4) or NGRAM:DRAFT_TOKENS",
        logprobs_enable="SGLang returns them for OpenAI requests with logprobs/top_logprobs "
                        "(native /generate: return_logprob with top_logprobs_num)",
        # SGLang computes them from logits its penalisers have changed in place;
        # SGLANG_RETURN_ORIGINAL_LOGPROB only skips the temperature: on 0.5.21 every committed
        # token of a penalised greedy request is its top-1, with speculation and without
        logprobs_default="tempered", logprobs_penalised=True,
        # it follows a request's seed only when started with --enable-deterministic-inference
        # (otherwise every request samples from a fixed seed, 42 on the device's generator)
        seeds_repeat=False, takes_stop_fields=True),
    # read from its /prometheus/metrics page, its iteration stats and its per-request
    # perf_metrics; specscope starts no TensorRT-LLM server and does not probe it
    Engine("trtllm", "TensorRT-LLM"),
    Engine(
        "llamacpp", "llama.cpp", (0.8, 0.95, 40, 0.05), owned_by="llama",
        log_format="llamacpp-log", spec_syntax="TYPE:DEPTH (draft-simple:3, ngram-simple:4)",
        logprobs_enable="llama-server returns them for requests with logprobs/top_logprobs "
                        "(n_probs on /completion); under speculation only for the first token "
                        "(upstream #27972)",
        penalty_window="llama.cpp counts penalties over its last repeat_last_n (64) tokens, the "
                       "prompt's included, which the probe does not see",
        # a per-slot sampler seed; its server ignores min_tokens and stop_token_ids
        truncation_first=True, seeds_repeat=True, takes_stop_fields=False),
)

BY_NAME: dict[str, Engine] = {e.name: e for e in ENGINES}


def engine(name: str) -> Engine:
    """The registered engine ``name``; a KeyError listing the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(BY_NAME)}") from None


def served(owned_by: str) -> str:
    """The engine whose servers write ``owned_by`` on ``/v1/models`` ("" where none does)."""
    owner = owned_by.lower()
    return next((e.name for e in ENGINES if e.owned_by and e.owned_by in owner), "")
