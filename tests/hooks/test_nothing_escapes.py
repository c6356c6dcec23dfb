"""Nothing of specscope ever reaches the engine: with the collector set and pyzmq missing,
every wrapped engine call still runs and returns its own result, the failure is counted, and
the failed recorder is not rebuilt on every step. SystemExit from specscope is caught too;
the user's KeyboardInterrupt and the engine's own exceptions pass through."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from specscope import schema
from tests.hooks.fakes import install_modules
from specscope.hooks import Recorder
from specscope.hooks import engines
from specscope.hooks.guard import guarded_phase


def _fake_engines(monkeypatch):
    sg = types.ModuleType("sglang.srt.speculative.eagle_utils")
    sg._is_hip, sg._is_cpu, sg._is_xpu, sg._is_cuda = False, False, False, True
    sg._verify_uses_greedy = lambda **kw: kw["is_all_greedy"]

    def eagle_sample(verify_input, batch, logits_output):
        return ("sglang-result", torch.tensor([1, 2], dtype=torch.int32), None)

    sg.eagle_sample = eagle_sample
    install_modules(monkeypatch, {"sglang.srt.speculative.eagle_utils": sg})

    sampler_mod = types.ModuleType("vllm.v1.sample.rejection_sampler")
    runner_mod = types.ModuleType("vllm.v1.worker.gpu_model_runner")

    class RejectionSampler:
        def forward(self, metadata, draft_probs, logits, sampling_metadata):
            return SimpleNamespace(sampled_token_ids=torch.tensor([[5, 6, -1]], dtype=torch.int32))

    class GPUModelRunner:
        def __init__(self):
            self.input_batch = SimpleNamespace(
                req_ids=["a"], vocab_size=50, temperature_cpu=np.array([0.7], dtype=np.float32),
                top_p_cpu=np.array([1.0], dtype=np.float32), top_k_cpu=np.array([50], dtype=np.int32))

        def _sample(self, logits, spec_decode_metadata):
            return RejectionSampler().forward(spec_decode_metadata, None, logits,
                                              SimpleNamespace(all_greedy=False, all_random=True))

    sampler_mod.RejectionSampler = RejectionSampler
    runner_mod.GPUModelRunner = GPUModelRunner
    install_modules(monkeypatch, {"vllm.v1.sample.rejection_sampler": sampler_mod,
                                  "vllm.v1.worker.gpu_model_runner": runner_mod})
    return sg, RejectionSampler, GPUModelRunner


def test_collector_without_pyzmq_never_stops_the_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSCOPE_COLLECTOR", "tcp://127.0.0.1:1")
    monkeypatch.setitem(sys.modules, "zmq", None)  # `import zmq` raises ModuleNotFoundError
    built = []
    real = engines.default_recorder

    def counting(*args, **kwargs):
        built.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(engines, "default_recorder", counting)
    sg, RejectionSampler, GPUModelRunner = _fake_engines(monkeypatch)
    from specscope.hooks.engines import sglang, vllm

    assert sglang.install() and vllm.install()
    batch = SimpleNamespace(reqs=[SimpleNamespace(rid="r0", sampling_params=SimpleNamespace(
        temperature=0.0, top_p=1.0, top_k=-1))] * 2,
                            sampling_info=SimpleNamespace(is_all_greedy=True))
    verify_input = SimpleNamespace(spec_steps=2, topk=1, draft_token_num=3)
    steps = 5
    for _ in range(steps):
        out = sg.eagle_sample(verify_input, batch, SimpleNamespace())
        assert out[0] == "sglang-result"  # the engine's own result, every step
        got = GPUModelRunner()._sample(torch.randn(3, 50), SimpleNamespace(num_draft_tokens=[2]))
        assert got.sampled_token_ids.tolist() == [[5, 6, -1]]
    lazy_sg = sg.eagle_sample._specscope_recorder
    lazy_vllm = RejectionSampler.forward._specscope_recorder
    for lazy in (lazy_sg, lazy_vllm):
        assert lazy.recorder is None
        assert "pyzmq" in lazy.failed and "pip install" in lazy.failed  # the install hint
        assert lazy.num_errors == 1  # counted once, then remembered
    assert built == ["sglang", "vllm"]  # one attempt each, not one per step


def test_system_exit_inside_specscope_is_caught_and_counted(run_record):
    class Exploding:
        accepts_columns = False

        def write(self, records):
            raise SystemExit("a sink that exits")

        def close(self):
            raise SystemExit("and on close")

    def exits(step):
        raise SystemExit(3)  # something on the hot path exits

    rec = Recorder(run_record, sinks=[Exploding()], stats_policy=exits)
    rec.record_verify(request_ids=["a"], num_accepted=torch.tensor([1]), num_drafted=2,
                      temperature=[0.0])
    assert rec.num_hook_errors == 1
    rec.flush()
    rec.close()
    assert rec.num_sink_errors >= 2

    lazy = engines.LazyRecorder()
    ran = []
    lazy.record(lambda: (_ for _ in ()).throw(SystemExit(1)), lambda r: ran.append(r))
    with lazy.phase(lambda: None, "verify"):
        ran.append("engine code")
    assert ran == ["engine code"] and lazy.num_errors == 1 and lazy.failed.startswith("SystemExit")


def test_timer_failures_never_skip_or_swallow_engine_code():
    errors = []

    class BadTimer:
        def __enter__(self):
            raise SystemExit("enter")

        def __exit__(self, *exc):
            raise RuntimeError("exit")

    ran = []
    with guarded_phase(BadTimer, lambda: errors.append(1)):
        ran.append(1)
    assert ran == [1] and errors == [1]

    class ExitFails:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            raise SystemExit("exit")

    with pytest.raises(ValueError, match="the engine's own"):
        with guarded_phase(ExitFails, lambda: errors.append(2)):
            raise ValueError("the engine's own error")
    assert errors == [1, 2]
    with pytest.raises(KeyboardInterrupt):  # the user's Ctrl-C is not ours to swallow
        with guarded_phase(lambda: (_ for _ in ()).throw(KeyboardInterrupt()), lambda: None):
            pass


def test_a_recorder_error_is_counted_on_the_recorder_too(run_record):
    rec = Recorder(run_record)
    lazy = engines.LazyRecorder(rec)
    lazy.record(lambda: rec, lambda r: (_ for _ in ()).throw(RuntimeError("boom")))
    assert lazy.num_errors == 1 and rec.num_hook_errors == 1
    assert not any(isinstance(r, schema.VerifyStepRecord) for r in rec.drain())
