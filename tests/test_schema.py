"""The record schema: round trips through dicts, JSONL and Parquet; bad input is refused."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope import schema
from specscope.io import codec
from specscope.io.parquet import read_parquet, write_parquet
from specscope.io.trace import read_trace, write_trace

ints = st.integers(min_value=0, max_value=2**40)
small = st.integers(min_value=0, max_value=64)
text = st.text(min_size=0, max_size=12)
floats = st.floats(min_value=0, max_value=5, allow_nan=False)


@st.composite
def entries(draw):
    drafted = draw(st.integers(0, 8))
    accepted = draw(st.integers(0, drafted))
    return schema.VerifyEntry(
        request_id=draw(text), num_drafted=drafted, num_draft_tokens=drafted,
        num_accepted=accepted, accepted_per_pos=tuple(int(i < accepted) for i in range(drafted)),
        temperature=draw(floats), top_p=draw(st.floats(0.1, 1.0)), top_k=draw(small),
        mode_requested=draw(st.sampled_from(schema.SAMPLING_MODES)),
        mode_used=draw(st.sampled_from(schema.SAMPLING_MODES)), num_verified=draw(small),
        num_top1=draw(small), expected_top1=draw(floats), var_top1=draw(floats),
        draft_top1_hist=tuple(draw(st.lists(small, min_size=0, max_size=11))),
        # the sharpness test's sums, where an entry carries them
        **draw(st.just({}) | st.tuples(small, st.lists(
            st.floats(-50, 50, allow_nan=False), min_size=len(schema.SHARP_GRID),
            max_size=len(schema.SHARP_GRID)).map(tuple)).map(
                lambda s: {"sharp_positions": s[0], "sharp_llr": s[1]})))


verify_records = st.builds(
    schema.VerifyStepRecord, run_id=text, config_id=text, rank=small, step=ints, t_ns=ints,
    batch_size=small, entries=st.lists(entries(), min_size=1, max_size=4).map(tuple))
request_records = st.builds(
    schema.RequestRecord, run_id=text, rank=small, request_id=text, prompt_id=text,
    t_arrival_ns=ints, t_first_token_ns=ints, t_finish_ns=ints, num_prompt_tokens=small,
    num_output_tokens=small, chunk_times_ns=st.lists(ints, max_size=5).map(tuple),
    chunk_num_tokens=st.lists(small, max_size=5).map(tuple), temperature=floats,
    output_token_ids=st.lists(small, max_size=5).map(tuple), output_text=text)
phase_records = st.builds(schema.PhaseRecord, run_id=text, rank=small, step=ints, phase=text,
                          device=text, t_start_ns=ints, duration_ns=ints)
fallback_records = st.builds(schema.FallbackRecord, run_id=text, rank=small, step=ints,
                             t_ns=ints, reason=text, request_id=text, count=small)
eval_records = st.builds(schema.EvalRecord, run_id=text, request_id=text,
                         exact_match=st.none() | st.booleans(), repetition_loop=st.booleans(),
                         invalid=st.none() | st.booleans())
any_record = st.one_of(verify_records, request_records, phase_records, fallback_records,
                       eval_records)


@given(any_record)
def test_dict_round_trip(record):
    assert codec.from_dict(json.loads(json.dumps(codec.to_dict(record)))) == record


@settings(max_examples=40, deadline=None)
@given(st.lists(any_record, max_size=8))
def test_jsonl_round_trip(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("t") / "trace.jsonl"
    write_trace(path, records)
    trace = read_trace(path)
    assert trace.records == records and not trace.problems


@settings(max_examples=25, deadline=None)
@given(st.lists(any_record, min_size=1, max_size=8))
def test_parquet_round_trip(tmp_path_factory, records):
    out = tmp_path_factory.mktemp("p")
    write_parquet(records, out)
    back = read_parquet(out)
    key = lambda r: json.dumps(codec.to_dict(r), sort_keys=True)  # noqa: E731
    assert sorted(map(key, back)) == sorted(map(key, records))


def test_unknown_kind_and_fields_are_refused():
    with pytest.raises(codec.SchemaError, match="unknown record kind"):
        codec.from_dict({"kind": "nope"})
    with pytest.raises(codec.SchemaError, match="unknown fields: bogus"):
        codec.from_dict({"kind": "phase", "bogus": 1})
    with pytest.raises(codec.SchemaError, match="phase record"):
        codec.from_dict({"kind": "phase", "run_id": "r"})  # missing required fields


def test_a_records_time_and_node_are_read_one_way():
    from specscope import schema as s

    phase = s.PhaseRecord(run_id="r", rank=0, node="", step=1, phase="verify", device="cpu", t_start_ns=5,
                          duration_ns=2)
    assert s.time_ns(phase) == 5 and s.time_ns(phase, end=True) == 5
    req = s.RequestRecord(run_id="r", request_id="q", rank=0, num_prompt_tokens=1, num_output_tokens=2,
                          t_arrival_ns=1, t_first_token_ns=3, t_finish_ns=9)
    assert s.time_ns(req) == 9 and s.time_ns(req, end=True) == 9
    assert s.time_ns(s.RequestRecord(run_id="r", request_id="q", rank=0, num_prompt_tokens=1,
                                     num_output_tokens=0, t_arrival_ns=4, t_first_token_ns=0,
                                     t_finish_ns=0)) == 4
    assert s.time_ns({"t_ns": 0, "t_arrival_ns": 7}) == 7 and s.time_ns({}) is None
    run = s.RunRecord(run_id="r", config_id="c", algorithm="eagle", num_steps=3, topk=1,
                      num_verify_tokens=4, backend="cpu", model="m", node="n1")
    evl = s.EvalRecord(run_id="r", request_id="q", correct=True)
    assert s.node_of(evl, {"r": run}) == "n1"  # a kind without a node of its own: its run's
    assert s.node_of(req, {"r": run}) == req.node  # its own, "" included
    assert s.node_of(evl, {}) == ""
