"""Acceptance by context length (``report --by context``)."""

from __future__ import annotations

from specscope import schema
from specscope.collector.context import bucket_of, context_buckets, format_buckets


def _collapsing(n_requests=6, steps=40, prompt=40):
    """Requests whose drafts are all accepted below 128 tokens of context and none above."""
    out = []
    for q in range(n_requests):
        rid, context = f"q{q}", prompt + 1
        for i in range(steps):
            a = 3 if context < 128 else 0
            out.append(schema.VerifyStepRecord(
                run_id="r", config_id="c", rank=0, step=q * 1000 + i, t_ns=i, batch_size=1,
                entries=(schema.VerifyEntry(request_id=rid, num_drafted=3, num_draft_tokens=3,
                                            num_accepted=a, accepted_per_pos=(1,) * a + (0,) * (3 - a),
                                            temperature=0.0),)))
            context += a + 1
        out.append(schema.RequestRecord(run_id="r", rank=0, request_id=rid, prompt_id=f"p{q % 3}",
                                        t_arrival_ns=0, t_first_token_ns=1, t_finish_ns=2,
                                        num_prompt_tokens=prompt, num_output_tokens=context - prompt))
    return out


def test_acceptance_that_collapses_with_context_shows_per_bucket():
    assert [bucket_of(n) for n in (0, 63, 64, 127, 128, 300)] == [0, 0, 64, 64, 128, 256]
    buckets = {b.lo: b for b in context_buckets(_collapsing())}
    # 41 tokens at the first step, 4 more per step: steps at 41 and 45..61 sit below 64
    assert buckets[0].request_steps == 6 * 6 and buckets[0].acceptance_length == 4.0
    assert buckets[64].acceptance_length == 4.0 and buckets[128].acceptance_length == 1.0
    assert buckets[128].ci == (1.0, 1.0) and buckets[128].prompts == 3 and buckets[128].requests == 6
    assert sum(b.request_steps for b in buckets.values()) == 6 * 40
    text = format_buckets(list(buckets.values()))
    assert "bonus token included" in text and "128-255" in text


def test_context_buckets_of_a_recorded_run_cover_every_drafting_step(tiny, run_record):
    from specscope.engine.decoder import Request, SpecConfig, SpeculativeDecoder
    from specscope.hooks import Recorder

    rec = Recorder(run_record, ring_slots=1024)
    SpeculativeDecoder(tiny.target, tiny.draft, SpecConfig(num_steps=3), recorder=rec).generate(
        [Request(f"q{i}", [5 + i] * (20 + 30 * i), max_new_tokens=60, temperature=0.7) for i in range(3)])
    records = rec.drain()
    steps = sum(1 for v in records if isinstance(v, schema.VerifyStepRecord) for e in v.entries
                if e.num_drafted > 0)
    buckets = context_buckets(records)
    assert sum(b.request_steps for b in buckets) == steps
    assert {b.lo for b in buckets} >= {0, 64}
    assert all(b.ci is None or b.ci[0] <= b.acceptance_length <= b.ci[1] for b in buckets)


def test_the_shipped_long_prompts_give_several_prompts_in_every_bucket(tiny, tmp_path):
    """The workload's long-context category: three prompts per size, so each bucket from 256
    tokens on has an interval over several prompts (the tiny model keeps up to 864 tokens)."""
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.workload import WorkloadSpec, run_workload
    from specscope.io.trace import read_trace

    spec = WorkloadSpec(requests=12, concurrency=4, max_new_tokens=24, temperature=0.7,
                        categories=("long",), reference=False)
    path = run_workload(tiny, SpecConfig(num_steps=3), spec, tmp_path / "long.jsonl", progress=False)
    buckets = {b.lo: b for b in context_buckets(read_trace(path).records)}
    assert set(buckets) == {256, 512}, buckets  # 384 tokens; 768 and 864 (the model's room)
    assert buckets[256].prompts == 3 and buckets[512].prompts == 9
    assert all(b.ci is not None and b.ci[0] <= b.acceptance_length <= b.ci[1] for b in buckets.values())
    reqs = read_trace(path).of(schema.RequestRecord)
    assert sorted({r.num_prompt_tokens for r in reqs}) == [384, 768, 864]
