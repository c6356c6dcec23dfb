"""Logs read a whole block at a time (columns) give exactly what the line-by-line path gives:
the same records, the same JSONL text, the same Parquet rows and the same identity tallies.

The lines are shaped as vLLM's and SGLang's loggers print them (the shapes the format tests read
from real logs): vLLM's current ``SpecDecoding metrics`` line with throughputs, counts,
per-position rates and the average rate; SGLang's ``Decode batch`` line with ``accept len``.
"""

from __future__ import annotations


import collections
import re
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope import schema
from specscope.io import codec
from specscope.importers import import_file, sglang_log, vllm_log
from specscope.io.columns import expand
from specscope.io.intervals import CountsColumns, SampleColumns

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _vllm_line(i: int, drafts: int, k: int, acc: list[int], tp: int | None) -> str:
    rates = ", ".join(f"{a / drafts:.3f}" for a in acc)
    who = f"(Worker_TP{tp} pid=7)" if tp is not None else "(APIServer pid=114)"
    return (f"{who} INFO 05-29 13:{i // 60 % 60:02d}:{i % 60:02d} [metrics.py:101] SpecDecoding "
            f"metrics: Mean acceptance length: {1 + sum(acc) / drafts:.2f}, Accepted throughput: "
            f"14.2 tokens/s, Drafted throughput: 33.1 tokens/s, Accepted: {sum(acc)} tokens, Drafted: "
            f"{drafts * k} tokens, Per-position acceptance rate: {rates}, Avg Draft acceptance rate: "
            f"{100 * sum(acc) / (k * drafts):.1f}%\n")


@st.composite
def vllm_logs(draw) -> str:
    k = draw(st.integers(1, 5))
    tp = draw(st.sampled_from([None, 0, 3]))
    lines = []
    for i in range(draw(st.integers(1, 30))):
        drafts = draw(st.integers(1, 5000))
        acc, left = [], drafts
        for _ in range(k):  # a prefix count: no position accepts more than the one before
            left = draw(st.integers(0, left))
            acc.append(left)
        lines.append(_vllm_line(i, drafts, k, acc, tp))
    return "".join(lines)


def _same(module, text: str, tmp_path, monkeypatch):
    """Import ``text`` with the block path and with the line path alone; assert they agree on
    the records, the identity tallies and the problems; return the block path's result."""
    path = tmp_path / "x.log"
    path.write_text(text)
    fast = module.parse(path, "r")
    with monkeypatch.context() as m:
        m.setattr(module, "_dense", lambda *a, **kw: False)
        slow = module.parse(path, "r")
    assert _records(fast) == _records(slow)
    assert _tallies(fast) == _tallies(slow)
    assert fast.problems == slow.problems
    return fast


def _records(res) -> list:
    return sorted((codec.to_dict(r) for r in expand(res.records)), key=lambda d: json.dumps(d, sort_keys=True))


def _tallies(res) -> dict:
    return {name: (t.held, t.failed) for name, t in res.identities.items()}


@SETTINGS
@given(text=vllm_logs())
def test_vllm_block_path_gives_the_line_path_records(tmp_path, monkeypatch, text):
    fast = _same(vllm_log, text, tmp_path, monkeypatch)
    assert any(isinstance(r, CountsColumns) and r.dense for r in fast.records)
    assert fast.problems == []


def test_vllm_block_path_steps_aside_where_k_varies(tmp_path, monkeypatch):
    """A block whose draft depth changes goes line by line, with the varying-k trap."""
    text = (_vllm_line(0, 100, 3, [60, 40, 20], None)
            + _vllm_line(1, 100, 2, [60, 40], None)
            # drafted / 3 disagrees with the printed mean: drafts come from the mean
            + _vllm_line(2, 100, 3, [60, 40, 20], None).replace("Drafted: 300", "Drafted: 250"))
    fast = _same(vllm_log, text, tmp_path, monkeypatch)
    assert not any(isinstance(r, CountsColumns) and r.dense for r in fast.records)
    assert "varying-k" in fast.traps


#: the settings line SGLang logs at start (cut to the two settings the counts rest on)
SG_ARGS = ("[2025-06-15 09:59:59] server_args={{'model_path': 'm', 'decode_log_interval': "
           "{interval}, 'speculative_algorithm': 'EAGLE', 'speculative_num_draft_tokens': 4}}\n")
SG_KEYS = ["#running-req", "#token", "token usage", "accept len", "accept rate",
           "gen throughput (token/s)", "#queue-req"]


@st.composite
def sglang_logs(draw) -> str:
    """Each field printed one way throughout (SGLang formats counts as integers, usage and
    throughput with two decimals), a nan now and then after the first line."""
    keys = draw(st.sampled_from([SG_KEYS, [k for k in SG_KEYS if k != "accept rate"]]))
    prefix = draw(st.sampled_from(["[{t} TP0] ", "[{t} DP1 TP2 EP2] ", "[{t}] "]))
    stop = draw(st.sampled_from([".", ","]))
    two = st.floats(0, 1e4, allow_nan=False).map(lambda x: f"{x:.2f}")
    fmt = {kk: draw(st.sampled_from([st.integers(0, 10 ** 6).map(str), two])) for kk in keys}
    lines = [draw(st.sampled_from(["", SG_ARGS.format(interval=1), SG_ARGS.format(interval=40)]))]
    for i in range(draw(st.integers(1, 25))):
        t = f"2025-06-15 10:{i // 60 % 60:02d}:{i % 60:02d}"
        vals = {kk: draw(st.one_of(fmt[kk], st.just("nan")) if i else fmt[kk]) for kk in keys}
        vals["accept len"] = draw(st.floats(1, 5, allow_nan=False).map(lambda x: f"{x:.2f}"))
        body = ", ".join(f"{kk}: {v}" for kk, v in vals.items())
        lines.append(prefix.format(t=t) + f"Decode batch{stop} " + body + "\n")
    return "".join(lines)


@SETTINGS
@given(text=sglang_logs())
def test_sglang_block_path_gives_the_line_path_records(tmp_path, monkeypatch, text):
    from specscope.importers import _common

    header = text[:text.find("\n") + 1] if "server_args=" in text else ""
    blocks = _common.blocks
    with monkeypatch.context() as m:
        if header:  # the settings line in a block of its own, as at the top of a long log
            m.setattr(_common, "blocks", lambda path, res, size=0: blocks(path, res, len(header)))
        fast = _same(sglang_log, text, tmp_path, monkeypatch)
    running = [float(v) for v in re.findall(r"#running-req: ([^,]+),", text)]
    if "'decode_log_interval': 1," not in text or all(0 < v < 100 and v.is_integer()
                                                      for v in running):
        # the block path took it (a block of counted lines with a batch it cannot count
        # exactly goes line by line, to the same records)
        assert any(isinstance(r, SampleColumns) for r in fast.records)
    assert fast.problems == []


D0 = "[2025-06-15 10:00:00 TP0] Decode batch. #running-req: 3, accept len: 2.50, #queue-req: 0\n"


def test_sglang_counts_only_where_each_line_is_one_batch(tmp_path):
    """With ``decode_log_interval`` 1 each line is one batch: its running requests are its
    request-steps, accept len x running its committed tokens (2 decimals: exact below 100
    requests). At another interval, or without the settings line, counts stay null."""
    # 7 tokens over 3 requests (4 drafts accepted), 13 over 7 (6 accepted)
    body = D0.replace("accept len: 2.50", "accept len: 2.33") + \
        D0.replace("#running-req: 3, accept len: 2.50", "#running-req: 7, accept len: 1.86")
    for header, want in ((SG_ARGS.format(interval=1), (10, 30, 4 + 6)),
                         (SG_ARGS.format(interval=40), (None, None, None)), ("", (None, None, None))):
        path = tmp_path / "x.log"
        path.write_text(header + body)
        for records in (sglang_log.parse(path, "r").records, import_file(path).records):
            got = [r for r in expand(records) if isinstance(r, schema.SpecCountsRecord)]
            assert len(got) == 2
            sums = tuple(None if any(getattr(r, f) is None for r in got) else
                         sum(getattr(r, f) for r in got)
                         for f in ("num_drafts", "num_draft_tokens", "num_accepted"))
            assert sums == want, (header, sums)


@pytest.mark.parametrize("other", [
    "[2025-06-15 10:00:01 TP0] Prefill batch. #new-seq: 1, #new-token: 9, #running-req: 3\n",
    "[2025-06-15 10:00:01 TP0] Decode batch. #running-req: 3, accept len: nan, #queue-req: 0\n",
    "[2025-06-15 10:00:01 TP0] Decode batch. #running-req: 3, accept len: 2.5, #queue-req: 0\n",
    "[2025-06-15 10:00:01 TP0] Decode batch. #running-req: 3, accept len: 2.50\n",
    "[2025-13-15 10:00:01 TP0] Decode batch. #running-req: 3, accept len: 2.50, #queue-req: 0\n",
], ids=["prefill-line", "unknown-accept-len", "other-decimals", "other-keys", "bad-time"])
def test_sglang_block_path_steps_aside(tmp_path, monkeypatch, other):
    """A block with another kind or shape of line goes line by line, to the same records."""
    fast = _same(sglang_log, D0 + other + D0, tmp_path, monkeypatch)
    assert not any(isinstance(r, SampleColumns) for r in fast.records)


@st.composite
def counts_blocks(draw) -> CountsColumns:
    np = pytest.importorskip("numpy")
    n = draw(st.integers(1, 300))
    k = draw(st.integers(0, 4))
    ints = st.lists(st.integers(0, 2 ** 40), min_size=n, max_size=n)
    # rounded figures repeat (a few distinct values, written through them); others do not
    pool = st.sampled_from([0.5, 2.34, 1e-05, 1e16, 3.0, float("nan")])
    floats = st.one_of(
        st.lists(st.one_of(st.floats(-1e9, 1e9, allow_nan=False), st.just(float("nan"))),
                 min_size=n, max_size=n),
        st.lists(pool, min_size=n, max_size=n))
    arrays = {"rank": np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int64),
              "t_ns": np.array(draw(ints), np.int64)}
    for name in ("interval_s", "reported_mean_acceptance_length", "reported_acceptance_rate",
                 "reported_weight"):
        if draw(st.booleans()):
            arrays[name] = np.array(draw(floats))
    for name in ("num_drafts", "num_draft_tokens", "num_accepted"):
        if draw(st.booleans()):
            arrays[name] = np.array(draw(ints), np.int64)
    if k:
        arrays["accepted_per_pos"] = np.array(draw(st.lists(
            st.lists(st.integers(0, 10 ** 6), min_size=k, max_size=k), min_size=n, max_size=n)), np.int64)
        if draw(st.booleans()):
            arrays["drafted_per_pos"] = np.array(draw(st.lists(
                st.lists(st.integers(0, 10 ** 6), min_size=k, max_size=k), min_size=n, max_size=n)),
                np.int64)
    return CountsColumns.of_arrays(draw(st.sampled_from(["r", 'a "%s" run'])), "vllm-v1", **arrays)


@settings(max_examples=60, deadline=None)
@given(block=counts_blocks())
def test_block_columns_write_what_their_records_write(block):
    """JSON text and Parquet rows from a block's arrays equal those of its rebuilt records
    (NaN is unknown: null), with odd run ids and unknown columns included."""
    pa = pytest.importorskip("pyarrow")
    from specscope.io.parquet import _rows

    records = block.to_records()
    assert block.json_text() == "".join(json.dumps(codec.to_dict(r), separators=(",", ":")) + "\n"
                                        for r in records)
    assert block.table(pa).to_pylist() == _rows(records)["spec_counts"]


def test_sample_block_writes_what_its_records_write():
    np = pytest.importorskip("numpy")
    pa = pytest.importorskip("pyarrow")
    from specscope.io.parquet import _rows

    values = np.array([[1.0, 2.5], [np.nan, 3.0], [0.1, 1e300]])
    for vals in (values, values[[0, 2]]):  # with and without a missing gauge
        n = len(vals)
        block = SampleColumns("r%s", "sglang", np.arange(n), np.arange(n) * 10, ["a", 'b"'], vals)
        records = block.to_records()
        assert block.json_text() == "".join(json.dumps(codec.to_dict(r), separators=(",", ":")) + "\n"
                                            for r in records)
        assert block.table(pa).to_pylist() == _rows(records)["sample"]
    assert collections.Counter(len(r.values) for r in SampleColumns(
        "r", "s", np.arange(3), np.arange(3), ["a", "b"], values).to_records()) == {2: 2, 1: 1}


def test_sglang_accept_len_is_weighted_by_its_lines_running_requests(tmp_path, monkeypatch):
    """An ``accept len`` averages over the line's running requests: 56 requests at 3.00 and 13
    at 1.50 give 2.72, not the 2.25 of two equal lines (the block and the line path alike)."""
    from specscope.collector.report import build_report

    lines = []
    for i in range(40):
        t = f"2025-06-15 10:{i // 60:02d}:{i % 60:02d}"
        lines.append(f"[{t} TP0] Decode batch. #running-req: 56, accept len: 3.00, #queue-req: 0\n")
        lines.append(f"[{t} TP0] Decode batch. #running-req: 13, accept len: 1.50, #queue-req: 0\n")
    fast = _same(sglang_log, "".join(lines), tmp_path, monkeypatch)
    assert any(isinstance(r, CountsColumns) for r in fast.records)  # the block path ran
    (sec,) = build_report(expand(fast.records))["runs"]
    assert sec["totals"]["reported_mean_acceptance_length"] == pytest.approx((56 * 3 + 13 * 1.5) / 69)


def test_negative_zero_keeps_its_sign_through_the_block_path():
    """A column of many equal values is written through its distinct ones: -0.0 stays -0.0, as
    ``json`` writes the record (numpy's unique would fold it into 0.0)."""
    np = pytest.importorskip("numpy")
    rates = np.zeros(100)
    rates[7] = -0.0
    block = CountsColumns.of_arrays("r", "vllm-v1", rank=np.zeros(100, np.int64),
                                    t_ns=np.arange(100, dtype=np.int64), reported_acceptance_rate=rates)
    text = block.json_text()
    assert text.count('"reported_acceptance_rate":-0.0') == 1
    assert text == "".join(json.dumps(codec.to_dict(r), separators=(",", ":")) + "\n"
                           for r in block.to_records())
