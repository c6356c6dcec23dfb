"""Runs whose acceptance is a setting, or whose verification is not per-token lossless, by
their own configuration: such a run's acceptance and sampling statistics are not measurements
of a draft against its target, and the checks built on them say so instead of alarming.

- **forced** acceptance, for benchmarking: vLLM ``rejection_sample_method: synthetic`` (with
  ``synthetic_acceptance_length`` / ``_rates``), llama.cpp ``--spec-synth-len`` /
  ``--spec-synth-rates``, SGLang ``SGLANG_SIMULATE_ACC_LEN``, TensorRT-LLM
  ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS``; where the configuration is not visible, the
  per-position fingerprint of the minimum-variance schedule these modes draw:
  ``[1, ..., 1, f, 0, ...]`` (exactly 1 and exactly 0 around at most one fraction) over
  ``MIN_DRAFTS`` drafts or more, which no draft model against its target produces. Position 1
  must be exactly 1: a broken draft also gives ``[f, 0, 0]`` (vLLM's CPU build, whose verify
  defect rejects nearly everything, does), so a forced run set below acceptance length 2 is
  recognised from its configuration only.
- **lossy** or not per-token verification: vLLM ``rejection_sample_method: block`` (block
  verification judges the drafts jointly) and ``fly``: the sampling-truth check's per-position
  expectation does not apply; output-quality checks (the eval gate) carry the verdict.
"""

from __future__ import annotations

from typing import Any, Sequence

from .. import schema
from .truth import SamplingTruthDetector
from .verdict import INCONCLUSIVE, Assessment

FORCED_METHODS = {"synthetic"}
LOSSY_METHODS = {"block", "fly"}
#: environment variables and run labels (engine flags as the importers and adapters record
#: them) that force acceptance
FORCED_ENV = ("SGLANG_SIMULATE_ACC_LEN", "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS")
FORCED_LABELS = ("spec_synth_len", "spec_synth_rates", "synthetic_acceptance_length",
                 "synthetic_acceptance_rates")
#: the fingerprint needs this many drafts: an honest position-1 rate of exactly 1.0 over them
#: would need the draft to agree with the target every time
MIN_DRAFTS = 200


def configured(run: schema.RunRecord | None) -> tuple[str, str]:
    """("forced" | "lossy" | "", why) from what the run says of its configuration."""
    if run is None:
        return "", ""
    method = run.labels.get("rejection_sample_method", "")
    if method in FORCED_METHODS:
        return "forced", f"acceptance forced by configuration (rejection_sample_method: {method})"
    for key in FORCED_LABELS:
        if run.labels.get(key):
            return "forced", f"acceptance forced by configuration ({key}: {run.labels[key]})"
    for key in FORCED_ENV:
        if run.env_flags.get(key):
            return "forced", f"acceptance forced by configuration ({key}={run.env_flags[key]})"
    if method in LOSSY_METHODS:
        return "lossy", f"verification not per-token by configuration (rejection_sample_method: {method})"
    return "", ""


def looks_forced(per_pos: Sequence[float | None], num_drafts: int) -> bool:
    """The minimum-variance schedule of a forced run: rates exactly 1 (at least the first),
    then at most one fraction, then exactly 0 (at least one), over ``MIN_DRAFTS`` drafts or
    more."""
    rates = [r for r in per_pos if r is not None]
    if num_drafts < MIN_DRAFTS or len(rates) < 2 or len(rates) != len(per_pos) or rates[0] != 1.0:
        return False
    fractions = [r for r in rates if 0.0 < r < 1.0]
    if len(fractions) > 1 or rates[-1] != 0.0:
        return False
    return all(a >= b for a, b in zip(rates, rates[1:]))


def kind_of(run: schema.RunRecord | None, stats: Any) -> tuple[str, str]:
    """The configuration's word, else the fingerprint's; ("", "") for a measured run."""
    kind, why = configured(run)
    if kind:
        return kind, why
    pp = list(stats.per_position_acceptance or ())
    if looks_forced(pp, stats.num_drafts):
        shown = ", ".join(f"{r:g}" for r in pp)
        return "forced", (f"acceptance looks forced: per-position schedule [{shown}] over "
                          f"{stats.num_drafts} drafts (exact 1s and 0s around one fraction)")
    return "", ""


class ConfiguredVerification:
    """Runs the acceptance- and distribution-based detectors only on runs that measure them.

    A forced run: every check of ``inner`` is INCONCLUSIVE with the reason and raises nothing
    (its acceptance is a setting). A lossy run: the sampling-truth checks are (the output
    quality checks carry the verdict); the others run as usual."""

    def __init__(self, run: schema.RunRecord | None, inner: Sequence[Any]) -> None:
        self.run, self.inner = run, tuple(inner)

    def assess(self, stats: Any, run_id: str = "") -> list[Assessment]:
        kind, why = kind_of(self.run, stats)
        out: list[Assessment] = []
        for d in self.inner:
            found = d.assess(stats, run_id)
            if kind == "forced" or (kind == "lossy" and isinstance(d, SamplingTruthDetector)):
                found = [Assessment(a.check, INCONCLUSIVE, {**a.evidence, "reason": why,
                                                            "speed_only": kind == "forced"},
                                    None, a.unit, None) for a in found]
            out += found
        return out
