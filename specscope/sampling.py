"""The sampling class of a request: one integer code, one name, one parser from the parameters
an engine holds (with that engine's own "off" values) and its inverse. Stdlib only; imports
nothing of specscope.

A class is a set of bits: ``SAMPLED`` (temperature > 0), ``TOP_P``, ``TOP_K``, ``MIN_P``; greedy
is 0 and carries no other bit. The hooks' statistics policy, the collector's truth classes and
the probe's classes all read it from here. Codes are never stored in traces (records carry the
parameters themselves), so a code's meaning may grow new bits without breaking a reader.

``code`` takes numbers or numpy arrays alike (operators only): the hot path classifies a whole
batch in a handful of array operations.
"""

from __future__ import annotations

from typing import Any

from . import registry

GREEDY = 0
SAMPLED, TOP_P, TOP_K, MIN_P = 1, 2, 4, 8
#: the truncations, in the order their names are written
_TRUNCATIONS = ((TOP_P, "top-p"), (TOP_K, "top-k"), (MIN_P, "min-p"))
#: every code a parser can return
CODES = (GREEDY,) + tuple(SAMPLED | t for t in range(0, 16, 2))

#: SGLang's "top_k off" after it normalises a request (the whole vocabulary); it also stores
#: temperature 0 as top_k 1 (its greedy) with temperature 1.0
TOP_K_ALL = registry.TOP_K_ALL

#: what an engine applies where a request leaves a parameter out: (temperature, top_p, top_k,
#: min_p). "" is specscope's own records (top_k 0 and top_p 1.0 are off). vLLM's
#: ``SamplingParams``: top_k 0 (or -1) off; its input batch holds "off" as the vocabulary size
#: (pass ``vocab_size``). SGLang's normalised ``SamplingParams``: top_k ``TOP_K_ALL`` off, -1
#: before normalising. llama.cpp's server truncates by default: top_k 40, top_p 0.95, min_p
#: 0.05, temperature 0.8 (``llama-server --help``); 0, 1.0 and 0.0 turn each off.
DEFAULTS: dict[str, tuple[float, float, int, float]] = {
    "": (1.0, 1.0, 0, 0.0),
    **{e.name: e.sampling_defaults for e in registry.ENGINES if e.sampling_defaults is not None},
}


def code(temperature: Any, top_p: Any = None, top_k: Any = None, min_p: Any = None, *,
         engine: str = "", vocab_size: int | None = None) -> Any:
    """The class of a request (or, elementwise, of a batch) from the parameters ``engine``
    holds; None: left out, the engine's default (``DEFAULTS``). top-k is off at 0 or below, at
    ``TOP_K_ALL`` or above, and at ``vocab_size`` or above where given; SGLang's top_k 1 is its
    greedy."""
    t0, p0, k0, m0 = DEFAULTS[engine]
    sampled = (t0 if temperature is None else temperature) > 0
    bits = sampled * SAMPLED
    if top_p is not None or p0 < 1.0:  # (a parameter left at "off" costs nothing)
        bits = bits | ((p0 if top_p is None else top_p) < 1.0) * TOP_P
    if top_k is not None or k0:
        k = k0 if top_k is None else top_k
        k_on = (k > 0) & (k < TOP_K_ALL)
        if vocab_size:
            k_on = k_on & (k < vocab_size)
        if engine == "sglang":
            sampled = sampled & (k != 1)
        bits = bits | k_on * TOP_K
    if min_p is not None or m0 > 0:
        bits = bits | ((m0 if min_p is None else min_p) > 0) * MIN_P
    return bits * sampled


def name(c: int) -> str:
    """A class's name: "greedy", "temperature", or its truncations ("top-p", "top-p+top-k")."""
    if not c & SAMPLED:
        return "greedy"
    return "+".join(n for bit, n in _TRUNCATIONS if c & bit) or "temperature"


def suffix(c: int) -> str:
    """What a sampled class adds to a mode's name ("" for plain temperature, "+top-p", ...)."""
    return "" if not c & SAMPLED or c == SAMPLED else "+" + name(c)


def of_name(text: str) -> int:
    """The code of a class name (``name``'s inverse); ValueError for an unknown one."""
    if text == "greedy":
        return GREEDY
    if text == "temperature":
        return SAMPLED
    bits = dict((n, bit) for bit, n in _TRUNCATIONS)
    try:
        return SAMPLED | sum({bits[part] for part in text.split("+")})
    except KeyError:
        raise ValueError(f"unknown sampling class {text!r}; classes are greedy, temperature "
                         "and truncations joined by '+' (top-p, top-k, min-p)") from None


def fields(c: int, temperature: float = 0.8, top_p: float = 0.9, top_k: int = 20,
           min_p: float = 0.05) -> dict[str, Any]:
    """Request fields that ask for class ``c`` (``code``'s inverse): temperature 0 for greedy,
    else ``temperature`` and each truncation the class holds, at the values given."""
    if not c & SAMPLED:
        return {"temperature": 0.0}
    out: dict[str, Any] = {"temperature": temperature}
    for bit, key, value in ((TOP_P, "top_p", top_p), (TOP_K, "top_k", top_k),
                            (MIN_P, "min_p", min_p)):
        if c & bit:
            out[key] = value
    return out
