"""The architecture, written down once: which part sits on which floor. Stdlib only, imports
nothing of specscope.

A module may import from its own part or from a part on a lower floor, lazily or not; parts on
the same floor sit side by side and never import each other. ``tests/architecture`` reads every
module's imports with ``ast`` and holds the code to this table.
"""

from __future__ import annotations

#: part (first component below ``specscope``; a top-level module is its own part) -> floor
FLOORS: dict[str, int] = {
    "layers": 0,
    "schema": 0,
    "exact": 0,  #: exact tails and sample sizes of the checks, pure math (hooks and collector)
    "pit": 1,  #: the whole-distribution test's sequential bound, pure math (hooks and collector)
    "sharp": 1,  #: the sharpness test's likelihood-ratio decision, pure math (hooks, collector, probe)
    "registry": 0,  #: the engines specscope knows, in one place (every per-engine table reads it)
    "sampling": 1,  #: the sampling class: one code, one name, one parser (hooks, collector, probe)
    "openai_wire": 0,  #: an OpenAI-compatible response's log-probabilities, read once
    "io": 1,
    "hooks": 2,
    "importers": 2,
    "collector": 2,
    "exporters": 3,
    "scrape": 3,
    "fleet": 3,  #: a fleet's store queried on DuckDB (embedded) or Spark (a cluster)
    "engine": 4,
    "probe": 4,  #: the black-box check of an OpenAI-compatible endpoint (a sweep's gate uses it)
    "serving": 5,
    "dashboard": 5,
    "demo_vllm": 6,  #: the demo on real vLLM servers
    "notebook": 6,
    "demo": 7,  #: the embedded demo, and the switch to demo_vllm
    "cli": 8,
    "__main__": 9,
    "__init__": 9,  #: the public API re-exports lazily from anywhere
}


def part_of(module: str) -> str:
    """The part a dotted module name belongs to ("specscope.io.wire" -> "io")."""
    parts = module.split(".")
    if parts[0] != "specscope":
        raise ValueError(f"{module} is not a specscope module")
    return parts[1] if len(parts) > 1 else "__init__"


def allowed(importer: str, imported: str) -> bool:
    """Whether module ``importer`` may import module ``imported`` (both under specscope)."""
    a, b = part_of(importer), part_of(imported)
    if imported == "specscope":  # `from specscope import x` reaches the public API
        return a in ("__init__", "__main__")
    return a == b or FLOORS[b] < FLOORS[a]
