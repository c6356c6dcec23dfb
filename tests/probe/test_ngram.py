"""Prompt lookup replayed from token ids: the proposer against a brute-force reading of its
rule on random and hand-built sequences, and roles that hold only where they reproduce the
engine's own per-step figures."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from specscope.probe.ngram import NgramSettings, infer, propose, replay


def _brute(tokens: list[int], s: NgramSettings) -> list[int]:
    """The rule said plainly: the longest suffix of min..max tokens that occurs earlier with a
    token after it, its earliest occurrence, and up to k tokens that followed."""
    total = len(tokens)
    for n in range(min(s.max_n, total - 1), s.min_n - 1, -1):
        for start in range(0, total - n):
            if tokens[start:start + n] == tokens[total - n:]:
                after = start + n
                return tokens[after:after + min(s.k, total - after)]
    return []


@pytest.mark.parametrize("seed", range(40))
def test_proposer_matches_its_rule_on_random_sequences(seed):
    rng = random.Random(seed)
    s = NgramSettings(rng.randint(1, 5), rng.randint(1, 3), 0)
    s = NgramSettings(s.k, s.min_n, s.min_n + rng.randint(0, 4))
    for _ in range(50):
        tokens = [rng.randint(0, 3) for _ in range(rng.randint(0, 40))]
        assert propose(tokens, s) == _brute(tokens, s), (tokens, s)


def test_hand_built_drafts():
    s = NgramSettings(4, 2, 5)
    # "1 2 3 4 5 6 ... 1 2" -> the earlier "1 2" is followed by 3 4 5 6
    assert propose([1, 2, 3, 4, 5, 6, 9, 1, 2], s) == [3, 4, 5, 6]
    # a single recurring token is below prompt_lookup_min
    assert propose([1, 7, 8, 1], s) == []
    # the longest suffix wins over an earlier shorter one: "2 3" occurs twice, "1 2 3" once
    assert propose([2, 3, 9, 1, 2, 3, 7, 1, 2, 3], s) == [7, 1, 2, 3]
    # equally long: the earliest occurrence
    assert propose([5, 6, 1, 5, 6, 2, 5, 6], s) == [1, 5, 6, 2]
    # fewer than k tokens follow the match: the draft stops at the context's end
    assert propose([1, 2, 3, 1, 2], s) == [3, 1, 2]
    assert propose([1, 2, 3, 1, 2], NgramSettings(4, 2, 5, max_model_len=6)) == [3]
    with pytest.raises(ValueError, match="K:MIN:MAX"):
        NgramSettings.parse("4:2")
    assert str(NgramSettings.parse("4:2:5")) == "4:2:5"


def test_replay_gives_each_token_its_role_and_checks_the_engine():
    s = NgramSettings(3, 2, 3)
    prompt = [10, 11, 12, 13, 14, 15]
    # output: 10 (prefill), 11 (step without draft: "10" alone is below min), then the
    # suffix "10 11" drafts 12 13 14; 12 13 accepted, 99 drawn at the rejection; then ...
    output = [10, 11, 12, 13, 99, 7]
    r = replay(prompt, output, s)
    assert r.ok and r.roles == ("prefill", "undrafted", "accepted", "accepted", "correction",
                                "undrafted")
    assert r.steps == ((3, 2),) and r.num_verified == 3
    # the engine's own per-step figures confirm it; other figures refute it
    assert replay(prompt, output, s, per_step=[(3, 2)]).roles == r.roles
    assert not replay(prompt, output, s, per_step=[(3, 1)]).ok
    assert "verify steps" in replay(prompt, output, s, per_step=[(3, 2), (3, 0)]).reason
    assert replay(prompt, output, s, totals=(3, 2)).ok
    assert "engine says" in replay(prompt, output, s, totals=(4, 2)).reason
    # a fully accepted draft is followed by the bonus token
    full = replay(prompt, [10, 11, 12, 13, 14, 8], s, per_step=[(3, 3)])
    assert full.roles[2:] == ("accepted", "accepted", "accepted", "bonus")
    # the output stops inside a draft: the engine may count acceptances the output cut off
    cut = replay(prompt, [10, 11, 12], s, per_step=[(3, 3)])
    assert cut.ok and cut.roles == ("prefill", "undrafted", "accepted")
    # the engine trimmed a draft (its drafted count says so)
    trimmed = replay(prompt, output, s, per_step=[(2, 2)])
    assert trimmed.ok and trimmed.roles[4] == "bonus"


def test_settings_are_inferred_from_the_engines_per_step_figures():
    rng = random.Random(3)
    truth = NgramSettings(4, 2, 5)
    samples = []
    for _ in range(12):  # outputs that copy stretches of their prompt, as prompt lookup meets
        prompt = [rng.randint(0, 30) for _ in range(60)]
        output = []
        while len(output) < 50:
            start = rng.randint(0, 50)
            output += prompt[start:start + rng.randint(2, 9)] + [rng.randint(31, 40)]
        r = replay(prompt, output, truth)
        samples.append((prompt, output, r.steps))
    found = infer(samples, k=4)
    assert truth in found
    # what else fits gives every token the same role: the roles, not the settings, matter
    for p, o, _ in samples:
        assert len({replay(p, o, s).roles for s in found}) == 1


def test_a_real_vllm_prompt_lookup_run_replays_exactly():
    """24 responses of vLLM 0.32 (CPU) serving SmolLM2-135M with prompt lookup at k 4 and
    n-grams of 2 to 5 (the probe's workload, token ids and per-step figures kept): the replay
    reproduces every verify step, and the settings read off the figures place tokens alike."""
    from specscope.probe.verified import infer_ngram

    responses = json.loads((Path(__file__).parent / "vllm_ngram_responses.json").read_text())
    truth = NgramSettings(4, 2, 5)
    steps = 0
    for r in responses:
        spec = r["metrics"]["speculative_decoding"]
        per_step = list(zip(spec.get("per_step_drafted") or [], spec.get("per_step_accepted") or []))
        got = replay(r["prompt_token_ids"], r["choices"][0]["token_ids"], truth, per_step=per_step)
        assert got.ok, got.reason
        steps += len(per_step)
    assert steps > 100
    answers = [SimpleNamespace(response=r, roles_by="") for r in responses]
    found, note = infer_ngram(answers)
    assert found is not None and "read off vLLM's per-step figures over" in note, note
    for r in responses:
        p, o = r["prompt_token_ids"], r["choices"][0]["token_ids"]
        assert replay(p, o, found).roles == replay(p, o, truth).roles
