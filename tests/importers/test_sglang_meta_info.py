"""SGLang's per-request ``meta_info`` (native /generate): its acceptance histogram gives the
per-position acceptance, exactly."""

from __future__ import annotations

import json

from specscope.collector.report import build_report
from specscope.importers import import_file


def meta(rid: str, hist: list[int], drafts: int = 3) -> dict:
    steps = sum(hist)
    accepted = sum(a * n for a, n in enumerate(hist))
    return {"text": "", "meta_info": {
        "id": rid, "completion_tokens": steps + accepted, "prompt_tokens": 9,
        "spec_verify_ct": steps, "spec_num_correct_drafts": accepted,
        "spec_num_proposed_drafts": steps * drafts, "spec_accept_rate": accepted / (steps * drafts),
        "spec_accept_length": (steps + accepted) / steps, "spec_correct_drafts_histogram": hist}}


def test_histogram_gives_per_position_acceptance(tmp_path):
    # request a: steps accepting 0, 1, 3, 3 drafts; request b: 2, 0
    path = tmp_path / "responses.json"
    path.write_text(json.dumps([meta("a", [1, 1, 0, 2]), meta("b", [1, 0, 1, 0])]))
    (section,) = build_report(import_file(path).records)["runs"]
    totals = section["totals"]
    assert (totals["num_drafts"], totals["draft_tokens"], totals["accepted_tokens"]) == (6, 18, 9)
    # position 1: accepted in 4 of 6 steps; position 2: 3 of 6; position 3: 2 of 6
    assert totals["per_position_acceptance"] == [4 / 6, 3 / 6, 2 / 6]
