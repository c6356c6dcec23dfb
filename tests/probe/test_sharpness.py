"""The sharpness check: a temperature applied wrongly FAILs on the side it went, honest sampling
does not, from raw log-probabilities with an unknown tail, under top-p, and as processed."""

from __future__ import annotations

import dataclasses
import math
import random

from specscope.probe.checks import Position, Semantics
from specscope.probe.sharpness import GRID, sharpness_check, support

from .honest import nucleus

VOCAB = 60  #: tokens per position; the engine returns the first 20 (an unknown tail of 40)
RAW = Semantics(engine="vllm")
PROCESSED = Semantics(engine="vllm", processed=True)


def positions(n: int, *, temperature: float = 0.8, top_p: float = 1.0, applied: float | None = None,
              seed: int = 0, processed: bool = False, returned: int = 20,
              listed_if_committed: bool = False) -> list[Position]:
    """``n`` positions over random Zipf-like distributions: the engine's log-softmax at
    temperature 1 (raw) or the distribution it sampled from (processed), its top ``returned``;
    the committed token drawn at ``applied`` (default: the requested ``temperature``), then
    top-p as vLLM applies it (after the temperature). ``listed_if_committed``: as vLLM's OpenAI
    server lists them, the committed token first and the list cut at ``returned``, so a
    committed token ranked below the list takes the last place."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        logits = sorted((rng.gauss(0.0, 2.5) - 0.15 * j for j in range(VOCAB)), reverse=True)

        def softmax(t: float, logits: list[float] = logits) -> list[float]:
            w = [math.exp((x - logits[0]) / t) for x in logits]
            return [x / sum(w) for x in w]

        def truncated(q: list[float]) -> list[float]:
            kept = nucleus(q, top_p)
            return [x / sum(kept) for x in kept] + [0.0] * (len(q) - len(kept))

        asked = truncated(softmax(temperature))
        drawn = truncated(softmax(applied or temperature))
        tok = rng.choices(range(VOCAB), weights=drawn)[0]
        shown = ([math.log(x) if x > 0 else -math.inf for x in asked] if processed
                 else [math.log(x) for x in softmax(1.0)])
        ranks = list(range(returned))
        if listed_if_committed and tok >= returned:
            ranks = ranks[:-1] + [tok]
        top = tuple((f"t{j}", shown[j]) for j in ranks)
        out.append(Position(request=f"r{i // 32}", index=i % 32, token=f"t{tok}",
                            logprob=shown[tok], top=top, temperature=temperature, top_p=top_p,
                            role="correction"))
    return out


def test_a_temperature_applied_twice_fails_as_sharper_and_honest_sampling_passes():
    sharp = sharpness_check(positions(1500, applied=0.64), RAW)
    assert sharp.state == "fail", sharp.evidence
    assert sharp.evidence["temperature_ratio"] < 1 and "sharper" in sharp.evidence["message"]
    flat = sharpness_check(positions(1500, applied=1.25, seed=1), RAW)
    assert flat.state == "fail" and flat.evidence["temperature_ratio"] > 1, flat.evidence
    assert "flatter" in flat.evidence["message"]
    honest = sharpness_check(positions(1500, seed=2), RAW)
    assert honest.state == "pass", honest.evidence
    assert honest.evidence["num_unread"] == 0 and honest.evidence["reading"] == "raw"


def test_under_top_p_only_tokens_surely_inside_the_nucleus_are_read_and_honest_is_not_failed():
    p = positions(1, top_p=0.9, seed=3)[0]
    s = support(p, RAW)
    assert s is not None
    lps, _, t = s
    w = [math.exp(lp / t) for lp in lps]
    # the last kept token has less than top-p above it even with the tail counted as empty
    assert sum(w[:-1]) / sum(math.exp(lp / t) for _, lp in p.top) < 0.9
    honest = sharpness_check(positions(1500, top_p=0.9, seed=4), RAW)
    assert honest.state != "fail", honest.evidence
    sharp = sharpness_check(positions(1500, top_p=0.9, applied=0.64, seed=5), RAW)
    assert sharp.state == "fail", sharp.evidence


def test_processed_figures_are_read_as_the_distribution_sampled_from():
    honest = sharpness_check(positions(1500, top_p=0.9, processed=True, seed=6), PROCESSED)
    assert honest.state != "fail" and honest.evidence["reading"] == "processed"
    sharp = sharpness_check(positions(1500, processed=True, applied=0.64, seed=7), PROCESSED)
    assert sharp.state == "fail", sharp.evidence


def test_false_alarms_stay_below_alpha_however_often_it_looks():
    """The mixture is a martingale: looked at after every 10 positions, honest runs reach 1/alpha
    no more often than alpha allows (here alpha 0.05, 100 runs: 5 expected at most, 13 is its
    binomial 99.9% bound)."""
    alarms = 0
    for seed in range(100):
        pos = positions(100, seed=100 + seed)
        if any(sharpness_check(pos[:m], RAW, alpha=0.05).state == "fail"
               for m in range(10, 101, 10)):
            alarms += 1
    assert alarms <= 13, alarms


def test_blind_positions_never_pass_and_nothing_read_is_inconclusive():
    blind = sharpness_check(positions(1500, seed=8), RAW, blind=True)
    assert blind.state == "inconclusive" and "unknown" in blind.evidence["reason"]
    greedy = [dataclasses.replace(p, temperature=0.0) for p in positions(10, seed=9)]
    empty = sharpness_check(greedy, RAW)
    assert empty.state == "inconclusive" and empty.evidence["num_positions"] == 0
    assert empty.evidence["p_value"] == 1.0 and len(GRID) == 8


def test_a_committed_token_listed_for_being_committed_is_not_read_as_the_distributions_best():
    """vLLM's OpenAI server lists the sampled token first and cuts at the count asked: a token
    ranked below the list takes its last place. Read as the best 20, honest sampling looks
    flatter than asked (a false FAIL on the real vLLM after about 2,000 positions); the check
    reads only the best 19."""
    pos = positions(3000, temperature=1.2, returned=8, listed_if_committed=True, seed=11)
    assert sum(1 for p in pos if p.top[-1][0] == p.token) > 100  # the trap is exercised
    honest = sharpness_check(pos, RAW)
    assert honest.state == "pass", honest.evidence
    lps, idx, _ = support(pos[0], RAW) or ((), 0, 0)
    assert len(lps) <= 7
