"""Each engine's Prometheus families, mapped once to specscope's figures.

One module per engine (``vllm``, ``sglang``, ``trtllm``, ``llamacpp``) declares an
:class:`EngineMetrics`: which counters, per-position counters, gauges and latency histograms it
reads, under which labels a model and a data-parallel rank are told apart, and how the figures
derive. The importer of ``/metrics`` text, ``specscope scrape``, the dashboard's live and
Prometheus sources, and ``specscope rules/grafana --engine`` all read these tables; specscope's
own exporter is mapped by its metric table (``exporters/prometheus.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

#: what a counter family counts
DRAFTS, DRAFT_TOKENS, ACCEPTED, EMITTED, VERIFY_CALLS, GENERATED = (
    "drafts", "draft_tokens", "accepted", "emitted", "verify_calls", "generated")
#: what a gauge reports (STEPS: the draft depth k the engine is configured with)
LENGTH, RATE, V0_RATE, STEPS = "length", "rate", "v0_rate", "steps"


@dataclass(frozen=True)
class EngineMetrics:
    """One engine's spec-decode and latency families."""

    engine: str  #: the run's algorithm label ("vllm", ...)
    source: str  #: the records' source
    counters: Mapping[str, str]  #: counter family -> DRAFTS, DRAFT_TOKENS, ...
    per_pos: str = ""  #: accepted tokens per draft position (a counter with ``pos_label``)
    #: drafted tokens per draft position (TensorRT-LLM; vLLM builds that export it)
    drafted_per_pos: str = ""
    pos_label: str = "position"
    gauges: Mapping[str, str] = field(default_factory=dict)  #: gauge family -> LENGTH, RATE
    #: histogram family -> the SpecStats histogram it fills (ttft_s, tpot_s, itl_token_s, ...)
    latency: Mapping[str, str] = field(default_factory=dict)
    model_label: str = "model_name"
    rank_label: str = ""  #: the data-parallel rank's label, where the engine has one
    #: whether the counters carry ``rank_label`` too (SGLang's are its tokenizer's: server-wide,
    #: only its scheduler's gauges are per rank)
    counters_by_rank: bool = True
    #: labels that split one run's series without naming another run (SGLang's scheduler
    #: labels its gauges with tp/pp/expert ranks and its generated-token counter with
    #: ``is_streaming``): counters under them are summed, gauges kept only where they agree
    qualifiers: tuple[str, ...] = ()
    #: the page names no model (llama.cpp): through Prometheus a run is also told apart by
    #: its target (``instance``)
    by_target: bool = False
    #: how acceptance length and rate derive, said in reports and rule files
    derivation: str = ""
    #: more gauges kept as engine samples, family -> sample name (with its unit)
    samples: Mapping[str, str] = field(default_factory=dict)
    #: info families (value 1, the configuration in labels), family -> {label: what it gives}:
    #: ``num_steps`` (the draft depth k) or a run label's name
    info: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(self.counters) + tuple(f for f in (self.per_pos, self.drafted_per_pos) if f) \
            + tuple(self.gauges) + tuple(self.samples) + tuple(self.info)


def _all() -> tuple[EngineMetrics, ...]:
    """Each registered engine's mapping, from its module here (named as the engine)."""
    import importlib

    from ... import registry

    return tuple(importlib.import_module(f"{__name__}.{e.name}").METRICS
                 for e in registry.ENGINES)


ENGINES: tuple[EngineMetrics, ...] = _all()
BY_NAME: dict[str, EngineMetrics] = {m.engine: m for m in ENGINES}
#: a record's source -> its engine's mapping
BY_SOURCE: dict[str, EngineMetrics] = {m.source: m for m in ENGINES} | {"vllm-v0-metrics": BY_NAME["vllm"]}
#: family -> its engine's mapping (the spec-decode families read)
BY_FAMILY: dict[str, EngineMetrics] = {f: m for m in ENGINES for f in m.families}
#: every spec-decode family read (a Prometheus source asks for exactly these)
FAMILIES: tuple[str, ...] = tuple(BY_FAMILY)
#: the engines' name prefixes ("vllm:", "trtllm_", ...): what tells a page's engine at a glance
PREFIXES: tuple[str, ...] = tuple(sorted({f[:f.index(":") + 1] if ":" in f else f[:f.index("_") + 1]
                                          for f in FAMILIES}))
#: latency histogram family -> (mapping, SpecStats histogram)
LATENCY: dict[str, tuple[EngineMetrics, str]] = {f: (m, h) for m in ENGINES
                                                  for f, h in m.latency.items()}
HIST_SERIES: tuple[str, ...] = tuple(f + tail for f in LATENCY for tail in ("_bucket", "_sum"))


def engine_of(family: str) -> EngineMetrics | None:
    return BY_FAMILY.get(family)


def where(m: EngineMetrics, labels: Mapping[str, str]) -> tuple[str, str]:
    """(model, rank) of a sample's labels under its engine's label names; the rank is empty
    where the sample has no rank label (an engine without ranks, or SGLang's server-wide
    counters beside its per-rank gauges). An engine whose page names no model (llama.cpp) is
    known by the ``model`` label a Prometheus relabel rule gives it (a router's
    ``__param_model``), else by its ``instance``."""
    model = labels.get(m.model_label, "")
    if not model and m.by_target:  # a page that names no model: known by its target
        model = labels.get("instance", "")
    return model, labels.get(m.rank_label, "") if m.rank_label else ""
