"""The columnar wire: what a recorder drains crosses as columns and comes back as the same
records; the previous JSON format is still accepted; bad messages are rejected by reason."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch

from specscope import schema
from specscope.io import codec
from specscope.collector.service import Collector
from specscope.hooks import Recorder
from specscope.io import transport, wire
from specscope.io.columns import VerifyColumns, expand
from specscope.io.parquet import read_parquet, write_parquet


def _recorder(run_record, steps=4, batch=3, **kw):
    rec = Recorder(run_record, clock_ns=lambda: 1_000_000, **kw)
    g = torch.Generator().manual_seed(0)
    for s in range(steps):
        logits = torch.randn(batch, 4, 32, generator=g)
        committed = logits.argmax(-1)
        rec.record_verify(
            request_ids=[f"req-{i}" for i in range(batch)],
            num_accepted=torch.tensor([s % 4, 1, 0][:batch]), num_drafted=3,
            temperature=[0.0, 0.7, 1.0][:batch], top_p=[1.0, 0.9, 1.0][:batch],
            top_k=[0, 0, 20][:batch], mode_used=None if s % 2 else ["greedy", "fallback-argmax", "x-new-mode"][:batch],
            committed_tokens=committed, target_logits=logits,
            draft_top1_probs=torch.rand(batch, 3, generator=g), draft_depth=3 if s < 2 else 2,
            depth_reason="acceptance fell" if s == 2 else "")
    rec.record_request(schema.RequestRecord(
        run_id=run_record.run_id, rank=0, request_id="req-0", t_arrival_ns=1, t_first_token_ns=2,
        t_finish_ns=3, num_prompt_tokens=4, num_output_tokens=5, category="math",
        num_verify_steps=4, num_draft_tokens=12, num_accepted=6,
        accept_len_hist=(0, 1, 1, 1, 1)))
    return rec


def test_columns_cross_the_wire_as_the_same_records(run_record):
    a, b = _recorder(run_record), _recorder(run_record)
    expected = a.drain(wait=True)
    out, (cols,) = b.drain_columns(wait=True)
    assert isinstance(cols, VerifyColumns) and len(cols) == 12 and cols.num_steps == 4
    (msg,) = wire.encode(out + [cols], pid=7)
    assert msg[:4] == wire.MAGIC
    pid, items, skipped = wire.decode_batch(msg)
    assert pid == 7 and skipped == 0
    assert expand(items) == expected  # every field of every entry, the mode names included
    steps = [r for r in expected if isinstance(r, schema.VerifyStepRecord)]
    assert [s.draft_depth for s in steps] == [3, 3, 2, 2]
    assert [s.depth_reason for s in steps] == ["", "", "acceptance fell", ""]
    assert {e.mode_used for s in steps for e in s.entries} >= {"x-new-mode", "fallback-argmax"}
    # the sharpness test's sums crossed with them: on the sampled entries, one per alternative
    sharp = [e for s in steps for e in s.entries if e.sharp_llr is not None]
    assert sharp and all(e.temperature > 0 and len(e.sharp_llr) == len(schema.SHARP_GRID)
                         for e in sharp)


def test_collector_totals_are_the_same_from_columns_json_and_records(run_record):
    rec = _recorder(run_record)
    out, (cols,) = rec.drain_columns(wait=True)
    records = out + cols.to_records()
    by_records, by_columns, by_json = Collector(), Collector(), Collector()
    by_records.observe(records)
    by_columns.observe(wire.decode_batch(wire.encode(out + [cols])[0])[1])
    (msg,) = wire.encode_json(out + [cols])
    by_json.observe(wire.decode_batch(msg)[1])

    def totals(c):
        return {k: (s.num_steps, s.draft_tokens, s.accepted_tokens, dict(s.modes), s.draft_hist,
                    {m: (t.num_verified, t.num_top1, round(t.expected_top1, 9))
                     for m, t in s.truth.items()})
                for k, s in c.snapshot().totals.items()}
    assert totals(by_records) == totals(by_columns) == totals(by_json)
    assert by_columns.health["verify_entries_observed"] == 12


def test_large_drains_are_chunked_and_counted_per_entry(run_record, monkeypatch):
    monkeypatch.setattr(wire, "MAX_ENTRIES", 5)
    rec = _recorder(run_record, steps=4, batch=3)
    out, (cols,) = rec.drain_columns(wait=True)
    counted = wire.messages(out + [cols])
    assert len(counted) == 3  # 12 entries in chunks of 5
    items = [x for m, _ in counted for x in wire.decode_batch(m)[1]]
    assert sum(len(c) for c in items if isinstance(c, VerifyColumns)) == 12
    assert [n for _, n in counted] == [len(out) + 5, 5, 2]


def _header_and_payload(msg: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack_from("<I", msg, 4)
    return json.loads(msg[8:8 + n]), msg[8 + n:]


def _reframe(header: dict, payload: bytes) -> bytes:
    head = json.dumps(header).encode()
    return wire.MAGIC + struct.pack("<I", len(head)) + head + payload


def test_bad_messages_are_rejected_by_reason_with_their_entries_counted(run_record):
    rec = _recorder(run_record)
    out, (cols,) = rec.drain_columns(wait=True)
    (msg,) = wire.encode(out + [cols])
    header, payload = _header_and_payload(msg)
    cases = {
        "oversized": msg + b"\0" * (wire.MAX_MESSAGE_BYTES + 1),
        "version": _reframe({**header, "v": 99}, payload),
        "short": _reframe(header, payload[:-10]),
        "dtype": _reframe({**header, "columns": [{**header["columns"][0], "arrays": {
            **header["columns"][0]["arrays"], "t_ns": ["<f4", 0, 48]}}]}, payload),
        "mode": _reframe({**header, "columns": [{**header["columns"][0], "modes": ["greedy"]}]},
                         payload),
    }
    collector = Collector()
    receiver = transport.ZmqReceiver.__new__(transport.ZmqReceiver)  # the handler alone, no socket
    receiver.collector, receiver.max_bytes = collector, wire.MAX_MESSAGE_BYTES
    for bad in cases.values():
        with pytest.raises(wire.WireError):
            wire.decode_batch(bad)
        receiver.handle(bad)
    h = collector.health
    assert h["batches_rejected_oversized"] == 1 and h["batches_rejected_version"] == 1
    assert h["batches_rejected_malformed"] == 3 and h["entries_rejected"] == 3 * 12
    assert h.get("batches_received", 0) == 0 and not collector.snapshot().totals
    receiver.handle(msg)  # and a good one after them goes through
    assert collector.health["batches_received"] == 1


def test_json_batches_of_the_previous_version_are_still_accepted(run_record):
    rec = _recorder(run_record)
    records = rec.drain(wait=True)
    old = json.dumps({"v": 2, "pid": 3, "records": [
        {k: v for k, v in codec.to_dict(r).items() if k not in ("draft_depth", "depth_reason")}
        for r in records if not isinstance(r, schema.RequestRecord)]}).encode()
    pid, items, skipped = wire.decode_batch(old)
    assert pid == 3 and skipped == 0
    assert sum(isinstance(r, schema.VerifyStepRecord) for r in items) == 4


def test_parquet_from_columns_equals_parquet_from_records(run_record, tmp_path):
    pytest.importorskip("pyarrow")
    rec = _recorder(run_record)
    out, (cols,) = rec.drain_columns(wait=True)
    records = out + cols.to_records()
    write_parquet(out + [cols], tmp_path / "cols")
    write_parquet(records, tmp_path / "rows")

    def key(r):
        return (type(r).__name__, getattr(r, "step", 0), getattr(r, "request_id", ""))
    assert sorted(read_parquet(tmp_path / "cols"), key=key) == sorted(records, key=key)
    assert sorted(read_parquet(tmp_path / "rows"), key=key) == sorted(records, key=key)


def test_request_ids_with_the_separator_survive():
    from specscope.io.columns import Strings

    s = Strings.of(["a\x00b", "c", ""])
    assert Strings(s.blob, 3).tolist() == ["a\ufffdb", "c", ""]
    assert Strings.of([]).tolist() == [] and np.asarray(Strings.of(["x"]).tolist()).size == 1
