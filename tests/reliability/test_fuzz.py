"""Bad input: fuzz campaigns over the trace reader, the collector's network input and the
OpenAI API (the importers have theirs in tests/importers). 0 crashes allowed; the counts of
inputs tried are recorded."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope import schema
from specscope.io import codec
from specscope.collector.service import Collector
from specscope.io.wire import decode_batch
from specscope.io.trace import TraceError, read_trace

from .conftest import FUZZ_EXAMPLES

RUN = schema.RunRecord(run_id="f", config_id="c", algorithm="eagle", num_steps=3, topk=1,
                       num_verify_tokens=4, backend="cpu", model="m")
STEP = schema.VerifyStepRecord(
    run_id="f", config_id="c", rank=0, step=1, t_ns=10, batch_size=1, entries=(schema.VerifyEntry(
        request_id="r", num_drafted=3, num_draft_tokens=3, num_accepted=2,
        accepted_per_pos=(1, 1, 0), temperature=0.7, top_p=1.0, top_k=0,
        mode_requested="speculative-sampling", mode_used="speculative-sampling"),))
SEED_LINES = [json.dumps({"kind": "header", "schema_version": schema.SCHEMA_VERSION}),
              json.dumps(codec.to_dict(RUN)), json.dumps(codec.to_dict(STEP))]
COUNTS = {"trace": 0, "collector": 0, "columnar": 0, "api": 0}


def _mutate(data: bytes, ops: list[tuple[int, int, int]]) -> bytes:
    b = bytearray(data)
    for kind, pos, val in ops:
        if not b:
            b.append(val % 256)
            continue
        pos %= len(b)
        if kind == 0:
            b[pos] = val % 256
        elif kind == 1:
            b.insert(pos, val % 256)
        elif kind == 2:
            del b[pos]
        elif kind == 3:
            b[pos:pos] = b[pos:pos + 1 + val % 40]
        else:
            del b[pos:]
    return bytes(b)


MUTATIONS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 10**6), st.integers(0, 255)),
                     max_size=12)
SETTINGS = settings(max_examples=FUZZ_EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@SETTINGS
@given(ops=MUTATIONS, lines=st.lists(st.sampled_from(SEED_LINES[1:]), max_size=20))
def test_trace_reader_never_crashes(tmp_path_factory, ops, lines):
    COUNTS["trace"] += 1
    path = tmp_path_factory.mktemp("fz") / "t.jsonl"
    path.write_bytes(_mutate("\n".join(SEED_LINES[:1] + lines).encode(), ops))
    try:
        trace = read_trace(path)
    except TraceError as exc:  # not a trace at all: one clear error naming the file
        assert str(path) in str(exc)
        return
    for p in trace.problems:  # every skipped line is named by file and line
        assert p.file == str(path) and p.line >= 1


@SETTINGS
@given(ops=MUTATIONS, n=st.integers(0, 5), junk=st.one_of(st.none(), st.binary(max_size=300)))
def test_collector_network_input_never_crashes(ops, n, junk):
    from specscope.io.transport import ZmqReceiver

    COUNTS["collector"] += 1
    msg = junk if junk is not None else _mutate(json.dumps(
        {"v": schema.SCHEMA_VERSION, "pid": 1,
         "records": [codec.to_dict(RUN), *[codec.to_dict(STEP)] * n]}).encode(), ops)
    collector = Collector()
    receiver = ZmqReceiver.__new__(ZmqReceiver)  # the handler alone, no socket
    receiver.collector, receiver.max_bytes = collector, 1 << 20
    receiver.handle(msg)  # never raises
    h = collector.health
    try:
        decode_batch(msg)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == (h.get("batches_received", 0) == 1)  # each batch counted one way or other
    collector.snapshot()  # and the state stays consistent


def _columnar_seed(n: int) -> bytes:
    from specscope.io.columns import VerifyColumns
    from specscope.io.wire import encode

    cols = VerifyColumns.from_records([STEP] * max(n, 1), detail=True)
    (msg,) = encode([RUN, *cols], pid=1)
    return msg


@SETTINGS
@given(ops=MUTATIONS, n=st.integers(0, 5))
def test_collector_columnar_input_never_crashes(ops, n):
    from specscope.io.transport import ZmqReceiver
    from specscope.io.wire import WireError

    COUNTS["columnar"] += 1
    msg = _mutate(_columnar_seed(n), ops)
    collector = Collector()
    receiver = ZmqReceiver.__new__(ZmqReceiver)  # the handler alone, no socket
    receiver.collector, receiver.max_bytes = collector, 1 << 20
    receiver.handle(msg)  # never raises
    try:
        decode_batch(msg)
        accepted = True
    except WireError:
        accepted = False  # any other exception fails the test: a crash
    assert accepted == (collector.health.get("batches_received", 0) == 1)
    collector.tick()
    collector.snapshot()


@pytest.fixture(scope="module")
def api():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from specscope.engine.decoder import SpecConfig
    from specscope.serving.server import Engine, EngineOptions

    eng = Engine(EngineOptions(model="tiny", config=SpecConfig(num_steps=2), max_tokens_limit=8))
    with TestClient(eng.app()) as client:
        yield client
    eng.close()


JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True)
                       | st.text(max_size=20),
                       lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c,
                                                                           max_size=4), max_leaves=12)
KEYS = st.sampled_from(["prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "n",
                        "stream", "stream_options", "stop", "ignore_eos", "max_completion_tokens"])


@SETTINGS
@given(body=st.dictionaries(KEYS, JSONISH, max_size=6) | JSONISH,
       path=st.sampled_from(["/v1/completions", "/v1/chat/completions"]))
def test_api_answers_bad_requests_without_a_server_error(api, body, path):
    COUNTS["api"] += 1
    r = api.post(path, content=json.dumps(body).encode(),  # NaN and Infinity included
                 headers={"content-type": "application/json"})
    assert r.status_code in (200, 400, 503), (body, r.status_code, r.text[:300])
    if r.status_code == 200 and isinstance(body, dict):
        for key in ("temperature", "top_p"):  # what was accepted was a usable number
            v = body.get(key)
            assert v is None or (isinstance(v, (int, float)) and v == v and abs(v) != float("inf"))


def test_fuzz_counts_recorded(figure):
    figure("fuzz: trace reader", inputs=COUNTS["trace"], crashes=0)
    figure("fuzz: collector network input (JSON)", inputs=COUNTS["collector"], crashes=0)
    figure("fuzz: collector network input (columnar)", inputs=COUNTS["columnar"], crashes=0)
    figure("fuzz: OpenAI API request bodies", inputs=COUNTS["api"], crashes=0)
    assert all(COUNTS.values()) or FUZZ_EXAMPLES == 0
