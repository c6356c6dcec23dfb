"""A llama-server log's run totals are what its own lines say: the last cumulative 'statistics'
line, the per-request lines' sum. Lines shaped as build 11434 prints them with two slots: a
statistics line printed as one slot's request ends counts accepted tokens of drafts an earlier
line already counted, so a differenced window holds more accepted than drafted tokens; where
two kinds of line disagree, the import says so and reports the per-request sums."""

from __future__ import annotations

from specscope import schema
from specscope.collector.stats import SpecStats
from specscope.importers import import_file

REQ = ("0.0{t}.000.000 I slot print_timing: id  {slot} | task {task} | draft acceptance = {r:.5f} "
       "( {a:4d} accepted / {g:4d} generated), mean len =  {m:.2f}\n")
STATS = ("0.0{t}.000.100 I spec common_specu: statistics     draft-simple: #calls(b,g,a) =    {b}"
         "    {c}    {v}, #gen drafts =    {d}, #acc drafts =    {ad}, #gen tokens =    {g}, "
         "#acc tokens =    {a}, #mean acc len = {m:.2f}, dur(b,g,a) = 0.1, 1.0, 0.01 ms\n")


def _log(tmp_path, requests, stats):
    lines = []
    for i, ((slot, task, a, g, steps), (d, ad, gt, at, v)) in enumerate(zip(requests, stats)):
        lines.append(REQ.format(t=i, slot=slot, task=task, r=a / g, a=a, g=g, m=1 + a / steps))
        lines.append(STATS.format(t=i, b=i + 1, c=v, v=v, d=d, ad=ad, g=gt, a=at, m=1 + at / v))
    path = tmp_path / "server.log"
    path.write_text("".join(lines))
    return path


def test_a_window_with_more_accepted_than_drafted_joins_the_next(tmp_path):
    # slot 0's task 2 ends first; its line's counters already hold slot 1's accepted tokens
    # of drafts counted before: the second window has 10 drafted and 11 accepted
    requests = [(0, 2, 8, 30, 6), (1, 0, 41, 45, 9), (0, 10, 7, 30, 4)]
    stats = [(13, 10, 65, 38, 12), (15, 13, 75, 49, 15), (21, 16, 105, 56, 20)]
    res = import_file(_log(tmp_path, requests, stats))
    assert not res.problems and "llamacpp-disagree" not in res.traps, res.traps
    windows = [r for r in res.records if isinstance(r, schema.SpecCountsRecord)]
    assert [(w.num_draft_tokens, w.num_accepted) for w in windows] == [(65, 38), (40, 18)]
    s = SpecStats().observe_all(res.records)
    assert (s.draft_tokens, s.accepted_tokens, s.num_clamped) == (105, 56, 0)  # the last line's


def test_kinds_that_disagree_are_named_and_the_per_request_sums_reported(tmp_path):
    requests = [(0, 2, 8, 30, 6), (1, 0, 41, 45, 9)]
    stats = [(13, 10, 65, 38, 12), (15, 13, 75, 45, 15)]  # the drafter's own: 45, not 49
    res = import_file(_log(tmp_path, requests, stats))
    trap = res.traps["llamacpp-disagree"]
    assert "75 drafted and 45 accepted" in trap and "sum to 75 and 49" in trap and "lines 2, 4" in trap
    s = SpecStats().observe_all(res.records)
    assert (s.draft_tokens, s.accepted_tokens) == (75, 49)
