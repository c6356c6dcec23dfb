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


def test_a_saved_stream_with_sglangs_figures_imports_and_one_without_says_why(tmp_path):
    import pytest

    from specscope import schema

    chunk = {"id": "r1", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
    details = meta("r1", [1, 0, 2, 1])["meta_info"]
    last = {"id": "r1", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 12},
            "sglext": {"spec_tokens_details": {k: v for k, v in details.items() if k != "id"}}}
    with_figures = tmp_path / "with.sse"
    with_figures.write_text("".join(f"data: {json.dumps(c)}\n\n" for c in (chunk, chunk, last))
                            + "data: [DONE]\n\n")
    result = import_file(with_figures)
    assert result.format == "sglang-responses"
    (req,) = [r for r in result.records if isinstance(r, schema.RequestRecord)]
    assert (req.request_id, req.num_verify_steps, req.num_accepted) == ("r1", 4, 7)
    without = tmp_path / "without.sse"
    without.write_text(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n")
    with pytest.raises(ValueError, match="return_spec_tokens_details"):
        import_file(without)
