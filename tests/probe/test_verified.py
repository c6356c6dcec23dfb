"""Which tokens the temperature check tests: a vLLM response under prompt lookup placed by the
replay (its roles confirmed by vLLM's per-step figures), left unknown without the settings;
and where the roles are unknown, a PASS stands only if a fault confined to the verified tokens
would have reached the share the check rules out."""

from __future__ import annotations

import math
from types import SimpleNamespace

from specscope.collector.verdict import Assessment
from specscope.probe.checks import Position, Semantics
from specscope.probe.client import place, positions_of
from specscope.probe.ngram import NgramSettings
from specscope.probe.verified import confined_share, guard, select, top1_floor

PROMPT = [10, 11, 12, 13, 14, 15]
OUTPUT = [10, 11, 12, 13, 99, 7]  # prefill, no draft, then "10 11" drafts 12 13 14: 2 accepted


def _vllm_response(per_step=((3, 2),)) -> dict:
    lps = [math.log(x) for x in (0.5, 0.3, 0.2)]
    content = [{"token": f"token_id:{t}", "logprob": lps[0],
                "top_logprobs": [{"token": f"token_id:{t}", "logprob": lps[0]},
                                 {"token": "token_id:1", "logprob": lps[1]},
                                 {"token": "token_id:2", "logprob": lps[2]}]} for t in OUTPUT]
    drafted, accepted = sum(d for d, _ in per_step), sum(a for _, a in per_step)
    hist = [0] * 4
    for _, a in per_step:
        hist[a] += 1
    return {"id": "chatcmpl-1", "prompt_token_ids": PROMPT,
            "choices": [{"index": 0, "message": {"content": "x"}, "token_ids": OUTPUT,
                         "logprobs": {"content": content}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 6, "completion_tokens": 6},
            "metrics": {"speculative_decoding": {
                "num_spec_steps": len(per_step), "num_draft_tokens": drafted,
                "num_accepted_draft_tokens": accepted, "acceptance_histogram": hist,
                "num_spec_tokens": 3, "mean_acceptance_length": 1 + accepted / len(per_step),
                "draft_acceptance_rate": accepted / drafted,
                "per_step_accepted": [a for _, a in per_step],
                "per_step_drafted": [d for d, _ in per_step]}}}


def test_a_prompt_lookup_response_is_placed_by_the_replay_and_only_by_it():
    resp = _vllm_response()
    pos = positions_of(resp, "r", {"temperature": 0.8})
    placed, drafted, accepted, by, verified, why = place(pos, resp, NgramSettings(3, 2, 3))
    assert (drafted, accepted, by, verified, why) == (3, 2, "replay", 3, "")
    assert [p.role for p in placed] == ["prefill", "undrafted", "accepted", "accepted",
                                        "correction", "undrafted"]
    # each drafted place names its draft in the responses' spelling: the rejected 14 too
    assert [p.draft for p in placed] == ["", "", "token_id:12", "token_id:13", "token_id:14", ""]
    # without the settings the roles stay unknown; vLLM's counts still bound the verified tokens
    blind = place(pos, resp, None)
    assert blind[3] == "" and blind[4] == 3 and "--ngram" in blind[5]
    assert {p.role for p in blind[0]} == {""}
    # /v1/completions: the prompt's ids sit in the choice
    completion = {**resp, "choices": [{**resp["choices"][0], "prompt_token_ids": PROMPT}]}
    del completion["prompt_token_ids"]
    assert place(pos, completion, NgramSettings(3, 2, 3))[3] == "replay"
    # settings that do not reproduce vLLM's own per-step figures are refused
    wrong = place(pos, resp, NgramSettings(3, 3, 3))
    assert wrong[3] == "" and "verify step 1" in wrong[5], wrong[5]


def _answer(positions, verified, roles_by=""):
    return SimpleNamespace(response={}, positions=positions, roles_by=roles_by,
                           verified_at_most=verified, why_unplaced="no token ids")


def _positions(n, p_top=0.4, request="r"):
    rest = (1 - p_top) / 3
    top = (("a", math.log(p_top)), ("b", math.log(rest)), ("c", math.log(rest)),
           ("d", math.log(rest)))
    return [Position(request=request, index=i, token="b", logprob=top[1][1], top=top,
                     temperature=1.0) for i in range(n)]


def test_a_blind_pass_stands_only_where_the_confined_fault_would_reach_what_it_rules_out():
    sem = Semantics()
    passed = Assessment("temperature honoured (temperature)", "pass", {"num_positions": 100})
    # every token verified (a draft model): the fault would make every token the top-1
    sel = select([_answer(_positions(100), 100)])
    assert sel.how == "blind" and abs(confined_share(sel, sem) - 1.0) < 1e-9
    assert guard(passed, sel, sem).state == "pass"
    # prompt lookup: 3 of 100 tokens verified: the fault moves the share by about 0.03 at most
    sel = select([_answer(_positions(100), 3)])
    floor = top1_floor(sel.positions[0], sem)
    assert abs(confined_share(sel, sem) - (3 + 97 * floor) / 100) < 1e-9
    g = guard(passed, sel, sem)
    assert g.state == "inconclusive" and "at most 3 of 100" in g.evidence["reason"]
    assert g.evidence["verified_at_most"] == 3 and g.evidence["positions_tested"] == "blind"
    # a request without any speculative counts beside ones with them: the fault could hide
    sel = select([_answer(_positions(50), 50), _answer(_positions(50, request="s"), None)])
    assert confined_share(sel, sem) is None and guard(passed, sel, sem).state == "inconclusive"
    # llama.cpp leaves draft_n out of a request that drafted nothing: none verified there
    sel = select([_answer(_positions(50), 50), _answer(_positions(50, request="s"), None)],
                 silent_drafted_nothing=True)
    assert abs(confined_share(sel, sem) - (50 + 50 * floor) / 100) < 1e-9
    # no request shows speculation (a target-only server): every token, nothing to dilute
    sel = select([_answer(_positions(50), None)])
    assert sel.how == "all" and guard(passed, sel, sem).state == "pass"
    # placed requests: only the tokens verify produced are tested
    placed = [Position(**{**p.__dict__, "role": r})
              for p, r in zip(_positions(4), ("prefill", "undrafted", "accepted", "correction"))]
    sel = select([_answer(placed, 2, roles_by="replay")])
    assert sel.how == "verify" and [p.role for p in sel.positions] == ["accepted", "correction"]
    # a FAIL is never softened
    failed = Assessment("temperature honoured (temperature)", "fail", {"num_positions": 100})
    assert guard(failed, select([_answer(_positions(100), 3)]), sem).state == "fail"
