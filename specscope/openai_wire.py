"""The OpenAI-compatible wire's log-probabilities, read once: where a response keeps the figures
of its committed tokens in each shape the engines return them. Stdlib only; the probe, the
response importer and the serving clients read them here.

- chat completions: ``choices[0].logprobs.content``, a list of ``{token, logprob,
  top_logprobs: [{token, logprob}, ...]}`` (streamed chunks carry the same per delta);
- completions: ``choices[0].logprobs`` with parallel ``tokens``, ``token_logprobs`` and
  ``top_logprobs`` (a ``{token: logprob}`` map per position);
- SGLang's native ``/generate`` with ``return_logprob``: ``meta_info.output_token_logprobs``,
  ``[logprob, token id, text]`` per token, and ``meta_info.output_top_logprobs``, a list of
  those per position (tokens named by id).

Figures are returned as written (a caller converts them: vLLM writes a cut token's -inf as
``MINUS_INF``; llama.cpp under speculation writes 0.0 with no alternatives, which is no figure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: vLLM writes a log-probability of -inf (a token its processed distribution cut) as this
MINUS_INF = -9999.0


@dataclass(frozen=True)
class TokenLogprob:
    """One committed token: its text (or id, as the engine named it), its log-probability as
    written (None where absent) and the alternatives that carry a figure, as written."""

    token: str
    logprob: Any
    top: tuple[tuple[str, Any], ...]


def content_items(choice: Any) -> list[dict[str, Any]]:
    """A chat choice's (or a streamed chunk's choice's) ``logprobs.content`` items, as written
    (one per committed token); [] where it has none."""
    lp = choice.get("logprobs") if isinstance(choice, dict) else None
    content = lp.get("content") if isinstance(lp, dict) else None
    return list(content) if isinstance(content, list) else []


def token_logprobs(response: dict[str, Any]) -> list[TokenLogprob]:
    """The committed tokens of a response's first choice with their figures, from whichever of
    the three shapes it holds; [] where it holds none."""
    choice = (response.get("choices") or [{}])[0]
    lp = choice.get("logprobs") if isinstance(choice, dict) else None
    lp = lp if isinstance(lp, dict) else {}
    if isinstance(lp.get("content"), list):
        return [TokenLogprob(str(e.get("token")), e.get("logprob"),
                             tuple((str(a.get("token")), a["logprob"]) for a in e.get("top_logprobs") or []
                                   if isinstance(a, dict) and a.get("logprob") is not None))
                if isinstance(e, dict) else TokenLogprob("", None, ())  # (no figure: unknown)
                for e in content_items(choice)]
    meta = response.get("meta_info") or {}
    if isinstance(meta.get("output_token_logprobs"), list):
        tops = meta.get("output_top_logprobs") or []
        out = []
        for i, e in enumerate(meta["output_token_logprobs"]):
            alts = tops[i] if i < len(tops) and isinstance(tops[i], list) else []
            out.append(TokenLogprob(str(e[1]), e[0],
                                    tuple((str(a[1]), a[0]) for a in alts if a and a[0] is not None)))
        return out
    if isinstance(lp.get("tokens"), list):
        return [TokenLogprob(str(tok), v, tuple((str(a), b) for a, b in (alts or {}).items()
                                                if b is not None))
                for tok, v, alts in zip(lp["tokens"], lp.get("token_logprobs") or [],
                                        lp.get("top_logprobs") or [])]
    return []
