"""The configuration advisor: predict acceptance length and tokens/s for other draft depths
from one run's measured per-position acceptance and phase costs. Never imports torch or dash.

Model (chain drafting):
- acceptance: verify accepts a prefix, so per-position acceptance p_i = P(L >= i) and
  AL(k) = 1 + sum_{i<=k} p_i (bonus token included). Beyond the measured depth K the
  conditional rate c = p_K / p_{K-1} is held: p_{K+j} = p_K * c^j.
- cost per step: t(k) = extend + k * draft_per_token + verify_fwd(k) + sample(k), where the
  draft cost per token is the measured draft phase over K, and verify forward and sampling
  scale as a + b * (k + 1) tokens when runs at two or more depths are given (a least-squares
  fit), else are held constant (the GPU regime: a small verify batch is latency-bound).
- tokens/s per request = AL(k) / t(k).
- k = 0 (no speculation) is a candidate wherever a target-only step was timed: a run without
  speculation among the measured ones, or the base run's own steps with speculation off (a
  speculation policy's); AL(0) = 1 and t(0) = the mean ``decode`` phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .section import Section


@dataclass
class Costs:
    extend_s: float
    draft_per_token_s: float
    verify_a_s: float  #: verify forward + sampling: fixed part
    verify_b_s: float  #: per token in the verify pass (0 when not fitted)
    depths: tuple[int, ...] = ()  #: the measured depths the costs came from

    def step_s(self, k: int) -> float:
        return self.extend_s + k * self.draft_per_token_s + self.verify_a_s + self.verify_b_s * (k + 1)


def _per_step(section: Section, *names: str) -> float:
    steps = section.totals.num_verify_steps or 0
    total = sum(section.phases[n].total_s or 0.0 for n in names if n in section.phases)
    return total / steps if steps else 0.0


def _depth(section: Section) -> int | None:
    return section.run.num_steps if section.run is not None else None


def _decode_step_s(sections: Sequence[Section]) -> float | None:
    """The mean target-only (``decode``) step of the first section that timed one."""
    for s in sections:
        d = s.phases.get("decode")
        if d is not None and d.n and d.total_s:
            return d.total_s / d.n
    return None


def predict_al(per_position: Sequence[float], k: int) -> float | None:
    p = [x for x in per_position if x is not None]
    if not p:
        return None
    if k <= len(p):
        return 1.0 + sum(p[:k])
    c = p[-1] / p[-2] if len(p) >= 2 and p[-2] > 0 else p[-1]
    extra = [p[-1] * c ** j for j in range(1, k - len(p) + 1)]
    return 1.0 + sum(p) + sum(extra)


def fit_costs(sections: Sequence[Section]) -> Costs | None:
    """Phase costs from measured runs (each a report section with phases and a depth)."""
    usable = [(s, k) for s in sections if s.phases and (k := _depth(s))]
    if not usable:
        return None
    ks = np.array([k for _, k in usable], dtype=float)
    draft = np.mean([_per_step(s, "draft") / k for s, k in usable])
    extend = float(np.mean([_per_step(s, "draft_extend") for s, _ in usable]))
    verify = np.array([_per_step(s, "verify_forward", "verify_sample") for s, _ in usable])
    if len(set(ks)) >= 2:
        b, a = np.polyfit(ks + 1, verify, 1)
        b = max(float(b), 0.0)
        a = float(np.mean(verify - b * (ks + 1)))
    else:
        a, b = float(verify.mean()), 0.0
    return Costs(extend, float(draft), a, b, tuple(sorted({int(k) for k in ks})))


def advise(base: Section, measured: Sequence[Section] = (),
           depths: Sequence[int] = range(1, 9)) -> dict[str, Any]:
    """Predictions for ``depths`` from ``base``, beside every measured run of the same model.

    Returns rows (depth, predicted AL and tok/s per request, measured where a run has that
    depth) and the mean absolute percentage error of the predictions on the measured runs.
    """
    pp = base.totals.per_position_acceptance
    costs = fit_costs([base, *measured])
    decode = _decode_step_s([*measured, base])
    by_k = {_depth(s): s for s in measured if s.phases}
    rows: list[dict[str, Any]] = []
    errors: dict[str, list[float]] = {"al": [], "tok_s": []}
    if decode is not None:
        rows.append({"num_steps": 0, "num_draft_tokens": 0, "predicted_al": 1.0,
                     "predicted_tok_s": 1.0 / decode, "measured_al": None, "measured_tok_s": None,
                     "note": "no speculation: the target-only step as measured"})
    for k in depths:
        al = predict_al(pp, k)
        step = costs.step_s(k) if costs else None
        row = {"num_steps": k, "num_draft_tokens": k + 1, "predicted_al": al,
               "predicted_tok_s": al / step if al and step else None,
               "measured_al": None, "measured_tok_s": None}
        m = by_k.get(k)
        if m is not None:
            mal = m.totals.mean_acceptance_length
            mstep = _per_step(m, "draft_extend", "draft", "verify_forward", "verify_sample")
            row["measured_al"] = mal
            row["measured_tok_s"] = mal / mstep if mal and mstep else None
            for key, pred, meas in (("al", row["predicted_al"], row["measured_al"]),
                                    ("tok_s", row["predicted_tok_s"], row["measured_tok_s"])):
                if pred and meas:
                    errors[key].append(abs(pred - meas) / meas * 100)
        rows.append(row)
    return {"rows": rows,
            "mape_al_pct": float(np.mean(errors["al"])) if errors["al"] else None,
            "mape_tok_s_pct": float(np.mean(errors["tok_s"])) if errors["tok_s"] else None,
            "num_measured": len(errors["al"]),
            "verify_cost_model": (f"a + b * tokens, fitted over depths {list(costs.depths)} "
                                  f"(b = {costs.verify_b_s * 1e3:.2f} ms per token)"
                                  if costs and len(costs.depths) >= 2 else
                                  "constant (one depth measured)"),
            "model": __doc__.split("Model (chain drafting):")[1].strip()}
