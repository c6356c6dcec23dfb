"""One batch row at zero: a row whose drafts are accepted far less often than the other rows'
is named (Fisher's exact test at alpha over the rows judged, under a tenth of their rate),
while rows that differ as workloads do, rows with too few drafts, and a batch of one row are
not; a row's counts travel through merges (the page's series: tests/golden/exposition.txt)."""

from __future__ import annotations

import pytest

from specscope.collector.slots import MIN_DRAFTS, slot_outliers


def test_a_row_at_zero_is_named_with_its_rate_and_the_others():
    (found,) = slot_outliers([400, 380, 420], [230, 0, 250])
    assert found.slot == 1 and found.rate == 0.0
    assert found.rest_rate == pytest.approx(480 / 820) and found.p_value < 1e-100


def test_rows_that_differ_as_workloads_do_or_have_few_drafts_are_not_named():
    assert slot_outliers([400, 400], [300, 120]) == []  # 0.75 against 0.3: a harder workload
    assert slot_outliers([400, MIN_DRAFTS - 1], [300, 0]) == []  # too few to judge
    assert slot_outliers([400], [0]) == []  # one row: nothing to compare with
    # under a tenth of the others' rate, but too few drafts for the exact test at 1e-9
    assert slot_outliers([MIN_DRAFTS, 10_000], [0, int(10_000 * 0.05)]) == []
    # the exact test's p is tiny at these counts, but the row is above a tenth of the others
    assert slot_outliers([10_000, 10_000], [700, 6_000]) == []
    assert slot_outliers([10_000, 10_000], [500, 6_000])[0].slot == 0  # under a tenth: named


def test_a_row_at_zero_is_judged_once_its_merged_counts_suffice():
    from specscope import schema
    from specscope.collector.detectors import SlotDetector
    from specscope.collector.stats import SpecStats

    def step(i: int) -> schema.VerifyStepRecord:
        entries = tuple(schema.VerifyEntry(
            request_id=f"q{r}", num_drafted=3, num_draft_tokens=3, num_accepted=0 if r == 1 else 2,
            accepted_per_pos=(0, 0, 0) if r == 1 else (1, 1, 0), temperature=0.0)
            for r in range(3))
        return schema.VerifyStepRecord(run_id="r", config_id="c", rank=0, step=i, t_ns=i,
                                       batch_size=3, entries=entries)

    halves = [SpecStats().observe_all(step(i) for i in range(k, k + 30)) for k in (0, 30)]
    assert SlotDetector().check(halves[0], "r") == []  # 90 draft tokens a row: not judged
    merged = halves[0].merge(halves[1])
    assert merged.row_draft_tokens == [180, 180, 180] and merged.row_accepted == [120, 0, 120]
    (flag,) = SlotDetector().check(merged, "r")
    assert flag.kind == "slot_at_zero" and flag.evidence["row"] == 1
    assert "batch row 1: acceptance 0.000 over 180 draft tokens against 0.667" in flag.message


def test_one_rank_at_zero_is_named_in_the_report_from_steps_or_requests():
    from specscope import schema
    from specscope.collector.report import build_report

    def request(rank: int, i: int, accepted: int) -> schema.RequestRecord:
        return schema.RequestRecord(run_id="r", rank=rank, request_id=f"{rank}-{i}",
                                    t_arrival_ns=i, t_first_token_ns=i + 1, t_finish_ns=i + 2,
                                    num_prompt_tokens=8, num_output_tokens=40,
                                    num_verify_steps=20, num_draft_tokens=60,
                                    num_accepted=accepted)

    run = schema.RunRecord(run_id="r", config_id="c", algorithm="draft-model", num_steps=3,
                           topk=1, num_verify_tokens=4, backend="llamacpp", model="m")
    # a two-slot llama.cpp log's requests: slot 1's drafts all rejected (the importer's ranks)
    records = [run] + [request(s, i, 0 if s == 1 else 35) for s in (0, 1) for i in range(4)]
    (section,) = build_report(records)["runs"]
    (flag,) = [a for a in section["anomalies"] if a["kind"] == "slot_at_zero"]
    assert flag["evidence"]["rank"] == "1" and flag["evidence"]["draft_tokens"] == 240
    assert flag["message"].startswith("rank 1: acceptance 0.000 over 240 draft tokens")
    even = [run] + [request(s, i, 30 + s) for s in (0, 1) for i in range(4)]
    assert not [a for a in build_report(even)["runs"][0]["anomalies"]
                if a["kind"] == "slot_at_zero"]
