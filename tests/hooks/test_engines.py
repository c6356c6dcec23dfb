"""Engine adapters: contract tests against the released vLLM/SGLang source, and functional
tests of the extraction code on tensors shaped as the real functions receive them."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specscope import schema
from specscope.hooks import Recorder, forbid_sync
from specscope.hooks.engines import CONTRACT_RELEASES, PATCH_POINTS, covered
from tests.conftest import ROOT
from tests.hooks.fakes import install_modules

WHEELS = Path(os.environ.get("SPECSCOPE_CACHE", Path.home() / ".cache" / "specscope")) / "wheels"


def _wheel(requirement: str) -> Path:
    """A released wheel, ``dist==version``, downloaded once without its dependencies."""
    dist, version = requirement.split("==")
    pattern = f"{dist.replace('-', '_')}-{version}-*.whl"
    found = sorted(WHEELS.glob(pattern))
    if not found:
        WHEELS.mkdir(parents=True, exist_ok=True)
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                              requirement, "-d", str(WHEELS)], capture_output=True,
                             text=True, timeout=900)
        found = sorted(WHEELS.glob(pattern))
        if got.returncode != 0 or not found:
            pytest.skip(f"cannot download the {requirement} wheel (no package registry?)")
    return found[0]


def _source(wheel: Path, module: str) -> ast.Module:
    with zipfile.ZipFile(wheel) as z:
        return ast.parse(z.read(module.replace(".", "/") + ".py"))


def _find(tree: ast.Module, qualname: str):
    node: ast.AST = tree
    for part in qualname.split("."):
        node = next(n for n in ast.iter_child_nodes(node)
                    if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
    return node


@pytest.mark.parametrize("engine,point,release",
                         [(e, p, r) for e, ps in PATCH_POINTS.items() for p in ps
                          for r in CONTRACT_RELEASES[e]],
                         ids=lambda v: v if isinstance(v, str) else v.qualname)
def test_patch_point_exists_with_the_expected_signature(engine, point, release):
    tree = _source(_wheel(release), point.module)
    fn = _find(tree, point.qualname)
    params = [a.arg for a in fn.args.args] + [a.arg for a in fn.args.kwonlyargs]
    assert params[:len(point.params)] == list(point.params), params
    assert covered(engine, release.split("==")[1])


@pytest.mark.parametrize("vllm_release", CONTRACT_RELEASES["vllm"])
def test_the_fields_the_adapters_read_exist_in_the_releases(vllm_release):
    (sglang_release,) = CONTRACT_RELEASES["sglang"]
    sg = _wheel(sglang_release)
    eagle_utils = _source(sg, "sglang.srt.speculative.eagle_utils")
    names = {t.id for n in eagle_utils.body if isinstance(n, ast.Assign) for t in n.targets
             if isinstance(t, ast.Name)}
    assert {"_is_hip", "_is_cpu", "_is_xpu", "_is_cuda"} <= names
    info = _find(_source(sg, "sglang.srt.speculative.eagle_info"), "EagleVerifyInput")
    fields = {n.target.id for n in info.body if isinstance(n, ast.AnnAssign)}
    assert {"spec_steps", "topk", "draft_token_num"} <= fields
    vl = _wheel(vllm_release)
    meta = _find(_source(vl, "vllm.v1.spec_decode.metadata"), "SpecDecodeMetadata")
    assert {"num_draft_tokens"} <= {n.target.id for n in meta.body
                                                    if isinstance(n, ast.AnnAssign)}
    sm = _find(_source(vl, "vllm.v1.sample.metadata"), "SamplingMetadata")
    assert {"all_greedy", "all_random"} <= {n.target.id for n in sm.body if isinstance(n, ast.AnnAssign)}
    ib = _find(_source(vl, "vllm.v1.worker.gpu_input_batch"), "InputBatch")
    init = _find(ib, "__init__")
    assigned = {t.attr for n in ast.walk(init) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Attribute)}
    assert {"temperature_cpu", "top_p_cpu", "top_k_cpu", "vocab_size"} <= assigned
    assert "req_ids" in {n.name for n in ib.body if isinstance(n, ast.FunctionDef)}
    rs = _source(vl, "vllm.v1.sample.rejection_sampler")
    (placeholder,) = [n for n in rs.body if isinstance(n, ast.AnnAssign)
                      and getattr(n.target, "id", "") == "PLACEHOLDER_TOKEN_ID"]
    assert ast.literal_eval(placeholder.value) == -1


def _defaults(tree: ast.Module, qualname: str, names: tuple[str, ...]) -> dict:
    """Class-level defaults of ``names`` in a released class, module constants resolved."""
    consts = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name)}
    body = _find(tree, qualname).body
    out = {}
    for n in body:
        if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") in names:
            value = n.value
            if isinstance(value, ast.Name):
                value = consts[value.id]
            out[n.target.id] = eval(compile(ast.Expression(value), "<default>", "eval"))
    return out


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_released_engines_default_sampling_params_are_plain_temperature(engine):
    """Each engine's own ``SamplingParams()`` as released, its "off" values as they are: a
    request that asked for nothing but a temperature is the temperature class, never top-k
    (SGLang's default top_k is ``1 << 30``, the whole vocabulary)."""
    from specscope import sampling

    release = CONTRACT_RELEASES[engine][-1]
    module = "sglang.srt.sampling.sampling_params" if engine == "sglang" else "vllm.sampling_params"
    tree = _source(_wheel(release), module)
    params = _defaults(tree, "SamplingParams", ("temperature", "top_p", "top_k", "min_p"))
    assert set(params) == {"temperature", "top_p", "top_k", "min_p"}, params
    if engine == "sglang":
        assert params["top_k"] == sampling.TOP_K_ALL
    assert sampling.name(sampling.code(engine=engine, **params)) == "temperature"
    assert sampling.name(sampling.code(engine=engine, **{**params, "temperature": 0.7})) \
        == "temperature"
    if engine == "sglang":  # and the hook reads them so
        from specscope.hooks.engines.sglang import requested

        assert requested(SimpleNamespace(**{**params, "temperature": 0.7})) == (0.7, 1.0, 0)


# ------------------------------------------------------------------ functional, on fake modules
@pytest.fixture
def fake_sglang(monkeypatch):
    mod = types.ModuleType("sglang.srt.speculative.eagle_utils")
    mod._is_hip, mod._is_cpu, mod._is_xpu, mod._is_cuda = True, False, False, False

    def _verify_uses_greedy(*, is_all_greedy, is_cpu, is_hip, is_xpu, use_rejection_sampling):
        return is_all_greedy or is_cpu or is_xpu or (is_hip and not use_rejection_sampling)

    def eagle_sample(verify_input, batch, logits_output):
        """As 0.5.21's: the accepted count comes back with the bonus token included."""
        bs = len(batch.reqs)
        n = verify_input.draft_token_num
        predict = torch.zeros(bs * n, dtype=torch.int32)
        accepted = [2, 0, 3][:bs]
        accept_index = torch.full((bs, verify_input.spec_steps + 1), -1, dtype=torch.int32)
        for b, a in enumerate(accepted):
            accept_index[b, :a + 1] = torch.arange(b * n, b * n + a + 1)
        return predict, torch.tensor(accepted, dtype=torch.int32) + 1, accept_index

    mod._verify_uses_greedy = _verify_uses_greedy
    mod.eagle_sample = eagle_sample
    install_modules(monkeypatch, {"sglang.srt.speculative.eagle_utils": mod})
    return mod


def test_sglang_hip_greedy_path_for_temperature_requests_is_recorded(fake_sglang, run_record):
    from specscope.hooks.engines import sglang

    rec = Recorder(run_record)
    assert sglang.install(rec) == ["sglang.srt.speculative.eagle_utils.eagle_sample"]
    reqs = [SimpleNamespace(rid=f"r{i}", sampling_params=SimpleNamespace(temperature=t, top_p=1.0, top_k=-1))
            for i, t in enumerate((0.7, 0.0, 1.0))]
    batch = SimpleNamespace(reqs=reqs, sampling_info=SimpleNamespace(is_all_greedy=False))
    verify_input = SimpleNamespace(spec_steps=3, topk=1, draft_token_num=4)
    logits = SimpleNamespace(next_token_logits=torch.randn(12, 50))
    with forbid_sync():
        fake_sglang.eagle_sample(verify_input, batch, logits)
    records = rec.drain(wait=True)
    (step,) = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    (phase,) = [r for r in records if isinstance(r, schema.PhaseRecord)]
    assert phase.phase == "verify_sample" and phase.step == step.step
    e = step.entries
    assert [x.request_id for x in e] == ["r0", "r1", "r2"]
    assert [x.num_accepted for x in e] == [2, 0, 3] and e[0].num_drafted == 3
    # on HIP without rejection sampling, temperature requests took the greedy path: visible,
    # as a fallback with its reason
    sampled = run_record.verify_mode  # what the configuration calls for at temperature > 0
    assert [(x.mode_requested, x.mode_used) for x in e] == [
        (sampled, schema.FALLBACK_ARGMAX), ("greedy", "greedy"), (sampled, schema.FALLBACK_ARGMAX)]
    fallbacks = [r for r in records if isinstance(r, schema.FallbackRecord)]
    assert [(f.request_id, f.reason, f.step) for f in fallbacks] == [
        ("r0", "sglang_hip_verify_argmax_without_rejection_sampling", step.step),
        ("r2", "sglang_hip_verify_argmax_without_rejection_sampling", step.step)]


def test_sglang_verify_steps_no_hook_saw_are_reported(fake_sglang, monkeypatch, run_record):
    """A release whose workers verify without going through the hooked function: SGLang's own
    per-step callback counts the steps, and after a few the adapter says so, in a warning and
    an anomaly in the trace."""
    from specscope.hooks.engines import sglang

    worker_mod = types.ModuleType("sglang.srt.speculative.ngram_worker")

    class NGRAMWorker:
        def on_verify_complete_cpu(self, num_correct, batch_size):
            return "engine"

    worker_mod.NGRAMWorker = NGRAMWorker
    install_modules(monkeypatch, {"sglang.srt.speculative.ngram_worker": worker_mod})
    rec = Recorder(run_record)
    assert "sglang.srt.speculative.ngram_worker.NGRAMWorker.on_verify_complete_cpu" in \
        sglang.install(rec)
    worker = NGRAMWorker()
    for _ in range(sglang.UNSEEN_AFTER - 1):
        assert worker.on_verify_complete_cpu([1], 1) == "engine"
    with pytest.warns(RuntimeWarning, match="no specscope hook saw them"):
        assert worker.on_verify_complete_cpu([1], 1) == "engine"
    (anomaly,) = [r for r in rec.drain(wait=True) if isinstance(r, schema.AnomalyRecord)]
    assert anomaly.kind == "unhooked_verify" and anomaly.evidence["engine_steps"] == 4


def test_sglang_requested_class_read_with_sglangs_own_defaults():
    """SGLang normalises what arrives: temperature 0 becomes top_k 1 (its greedy), top_k off
    (-1) becomes 1 << 30, the whole vocabulary."""
    from specscope.hooks.engines.sglang import TOP_K_ALL, requested

    def params(t, p=1.0, k=TOP_K_ALL):
        return SimpleNamespace(temperature=t, top_p=p, top_k=k)

    assert requested(params(1.0, k=1)) == (0.0, 1.0, 0)  # temperature 0, as SGLang stores it
    assert requested(params(0.8)) == (0.8, 1.0, 0)
    assert requested(params(0.8, 0.9, -1)) == (0.8, 0.9, 0)
    assert requested(params(0.8, k=20)) == (0.8, 1.0, 20)


def _fake_vllm(monkeypatch, outputs: torch.Tensor, input_batch):
    """vLLM's sampler and runner as fakes shaped like 0.32/0.33's: the runner's ``_sample``
    calls ``rejection_sampler.forward``, which returns ``outputs``."""
    sampler_mod = types.ModuleType("vllm.v1.sample.rejection_sampler")
    runner_mod = types.ModuleType("vllm.v1.worker.gpu_model_runner")

    class RejectionSampler:
        def forward(self, metadata, draft_probs, logits, sampling_metadata):
            logits.mul_(0.0)  # vLLM may process the logits in place: read them before
            return SimpleNamespace(sampled_token_ids=outputs.clone())

    class GPUModelRunner:
        def __init__(self):
            self.input_batch = input_batch
            self.rejection_sampler = RejectionSampler()

        def _sample(self, logits, spec_decode_metadata, draft_probs=None, sampling=None):
            return self.rejection_sampler.forward(
                spec_decode_metadata, draft_probs, logits,
                sampling or SimpleNamespace(all_greedy=False, all_random=False))

    sampler_mod.RejectionSampler = RejectionSampler
    runner_mod.GPUModelRunner = GPUModelRunner
    install_modules(monkeypatch, {"vllm.v1.sample.rejection_sampler": sampler_mod,
                                  "vllm.v1.worker.gpu_model_runner": runner_mod})
    return RejectionSampler, GPUModelRunner


def test_sglang_verify_that_commits_the_argmax_for_temperature_requests_fails_sampling_truth(
        monkeypatch, run_record):
    """The ROCm incident inside SGLang's verify: temperature requests commit the target argmax
    along their accepted paths. The adapter reads the logits before the call and the committed
    tokens at accept_index; sampling truth sees every committed token is the argmax."""
    from specscope.collector.detectors import SamplingTruthDetector
    from specscope.collector.stats import SpecStats
    from specscope.hooks.engines import sglang

    mod = types.ModuleType("sglang.srt.speculative.eagle_utils")
    mod._is_hip, mod._is_cpu, mod._is_xpu, mod._is_cuda = True, False, False, False
    mod._verify_uses_greedy = lambda **kw: True
    bs, n, vocab = 8, 4, 64

    def eagle_sample(verify_input, batch, logits_output):
        predict = logits_output.next_token_logits.argmax(dim=-1).to(torch.int32)
        accept_index = torch.arange(bs * n, dtype=torch.int32).reshape(bs, n)
        accept_index[:, 2:] = -1  # one draft token accepted, then the bonus
        logits_output.next_token_logits.div_(0.7)  # the engine scales in place afterwards
        return predict, torch.ones(bs, dtype=torch.int32), accept_index

    mod.eagle_sample = eagle_sample
    install_modules(monkeypatch, {"sglang.srt.speculative.eagle_utils": mod})
    rec = Recorder(run_record, stats_policy=lambda step: True)
    sglang.install(rec)
    reqs = [SimpleNamespace(rid=f"r{i}", sampling_params=SimpleNamespace(
        temperature=1.0, top_p=1.0, top_k=-1)) for i in range(bs)]
    batch = SimpleNamespace(reqs=reqs, sampling_info=SimpleNamespace(is_all_greedy=False))
    verify_input = SimpleNamespace(spec_steps=n - 1, topk=1, draft_token_num=n)
    gen = torch.Generator().manual_seed(0)
    with forbid_sync():
        for _ in range(12):
            logits = SimpleNamespace(next_token_logits=torch.randn(bs * n, vocab, generator=gen))
            mod.eagle_sample(verify_input, batch, logits)
    stats = SpecStats().observe_all(rec.drain(wait=True))
    (truth,) = stats.truth.values()
    assert truth.num_verified == 12 * bs * 2 and truth.num_top1 == truth.num_verified
    (check,) = [a for a in SamplingTruthDetector().assess(stats) if "greedy" not in a.check]
    assert check.state == "fail"


def test_vllm_warmup_is_no_step_and_rows_without_a_draft_are_no_entries(monkeypatch, run_record):
    import numpy as np

    # rows drafted 3, 0 (n-gram found nothing) and 2 tokens; logits rows are contiguous per
    # request (drafted + 1 each): 4 + 1 + 3 = 8 rows; the argmax of row r is token r
    logits = torch.full((8, 50), -5.0)
    logits[torch.arange(8), torch.arange(8)] = 5.0
    outputs = torch.tensor([[0, 1, -1, -1], [4, -1, -1, -1], [5, 6, 7, -1]], dtype=torch.int32)
    batch = SimpleNamespace(req_ids=["a", "b", "c"], vocab_size=50,
                            temperature_cpu=np.array([0.0, 0.7, 0.0], dtype=np.float32),
                            top_p_cpu=np.ones(3, dtype=np.float32),
                            top_k_cpu=np.full(3, 50, dtype=np.int32))
    sampler, runner = _fake_vllm(monkeypatch, outputs, batch)
    from specscope.hooks.engines import vllm

    rec = Recorder(run_record)
    vllm.install(rec)
    meta = SimpleNamespace(num_draft_tokens=[3, 0, 2], max_spec_len=3)
    sampler().forward(meta, None, logits.clone(), SimpleNamespace(all_greedy=False))  # warm-up
    assert not [r for r in rec.drain(wait=True) if isinstance(r, schema.VerifyStepRecord)]
    draft_probs = torch.full((5, 50), 0.01)
    draft_probs[:, 0] = 1.0 - 0.49  # top-1 0.51 at every drafted position
    with forbid_sync():
        runner()._sample(logits.clone(), meta, draft_probs)
    (step,) = [r for r in rec.drain(wait=True) if isinstance(r, schema.VerifyStepRecord)]
    e = step.entries
    assert [x.request_id for x in e] == ["a", "c"]  # b drafted nothing: no verify entry
    assert [x.num_drafted for x in e] == [3, 2] and [x.num_accepted for x in e] == [1, 2]
    assert [x.mode_used for x in e] == ["greedy", "greedy"]
    # sampling truth from the logits as they were before verify ran: every committed token of
    # these greedy rows is the argmax (2 and 3 verified positions)
    assert [(x.num_verified, x.num_top1) for x in e] == [(2, 2), (3, 3)]
    # draft health: 3 and 2 drafted positions, the padding of the shorter row not counted
    assert [sum(x.draft_top1_hist) for x in e] == [3, 2] and all(
        x.draft_top1_hist[5] == sum(x.draft_top1_hist)
        for x in e)


def test_vllm_runner_names_requests_and_their_sampling_without_sync(monkeypatch, run_record):
    import numpy as np

    sampler_mod = types.ModuleType("vllm.v1.sample.rejection_sampler")
    runner_mod = types.ModuleType("vllm.v1.worker.gpu_model_runner")

    class RejectionSampler:
        def forward(self, metadata, draft_probs, logits, sampling_metadata):
            return SimpleNamespace(sampled_token_ids=torch.tensor(
                [[11, 12, -1, -1], [21, 22, 23, 24], [31, -1, -1, -1]], dtype=torch.int32))

    class GPUModelRunner:  # shaped as vLLM 0.33's: the batch on self.input_batch
        def __init__(self):
            self.input_batch = SimpleNamespace(
                req_ids=["chatcmpl-a", "chatcmpl-b", "chatcmpl-c", "stale"], vocab_size=50,
                temperature_cpu=np.array([0.7, 0.0, 1.0, 9.9], dtype=np.float32),
                top_p_cpu=np.array([0.9, 1.0, 1.0, 1.0], dtype=np.float32),
                top_k_cpu=np.array([50, 50, 20, 50], dtype=np.int32))
            self.rejection_sampler = RejectionSampler()

        def _sample(self, logits, spec_decode_metadata):
            return self.rejection_sampler.forward(spec_decode_metadata, None, logits,
                                                  SimpleNamespace(all_greedy=False, all_random=False))

    sampler_mod.RejectionSampler = RejectionSampler
    runner_mod.GPUModelRunner = GPUModelRunner
    install_modules(monkeypatch, {"vllm.v1.sample.rejection_sampler": sampler_mod,
                                  "vllm.v1.worker.gpu_model_runner": runner_mod})
    from specscope.hooks.engines import vllm

    rec = Recorder(run_record)
    assert vllm.install(rec) == ["vllm.v1.sample.rejection_sampler.RejectionSampler.forward",
                                 "vllm.v1.worker.gpu_model_runner.GPUModelRunner._sample"]
    with forbid_sync():
        GPUModelRunner()._sample(torch.randn(12, 50), SimpleNamespace(num_draft_tokens=[3, 3, 3]))
    records = rec.drain(wait=True)
    (step,) = [r for r in records if isinstance(r, schema.VerifyStepRecord)]
    e = step.entries
    assert [x.request_id for x in e] == ["chatcmpl-a", "chatcmpl-b", "chatcmpl-c"]
    assert [round(x.temperature, 2) for x in e] == [0.7, 0.0, 1.0]
    assert [round(x.top_p, 2) for x in e] == [0.9, 1.0, 1.0] and [x.top_k for x in e] == [0, 0, 20]
    assert [x.mode_requested for x in e] == [run_record.verify_mode, "greedy", run_record.verify_mode]
    assert [x.mode_used for x in e] == ["speculative-sampling", "greedy", "speculative-sampling"]
    assert [x.num_accepted for x in e] == [1, 3, 0]
    (phase,) = [r for r in records if isinstance(r, schema.PhaseRecord)]
    assert phase.phase == "verify_sample" and phase.step == step.step


def test_unknown_versions_are_not_patched(monkeypatch):
    from specscope.hooks import engines

    assert not covered("sglang", "0.4.9") and covered("sglang", "0.5.30")
    monkeypatch.setattr(engines, "covered", lambda engine, version=None: False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object() if name == "sglang" else None)
    monkeypatch.setattr(engines, "installed_version", lambda name: "0.4.9")
    with pytest.warns(RuntimeWarning, match=r"sglang 0.4.9 is not a covered release \(0.5\); not patching"):
        assert engines.install() == []


def test_wrap_installs_the_adapters_in_every_python_process(tmp_path):
    code = ("import sys, subprocess; print('specscope.hooks.engines' in sys.modules); "
            "print(subprocess.run([sys.executable, '-c', \"import sys; print('specscope.hooks.engines' "
            "in sys.modules)\"], capture_output=True, text=True).stdout.strip())")
    out = subprocess.run([sys.executable, "-m", "specscope", "wrap", "--trace-dir", str(tmp_path),
                          "--", sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]  # the command and the process it started


def test_vllm_probabilistic_drafts_give_the_residual_rule_the_drafts_distribution(
        monkeypatch, run_record):
    import numpy as np

    # a sampled row (a) drafted tokens 3 and 4; verify accepted 3 and drew 9 in place of 4;
    # the other row (b) drafted nothing
    logits = torch.zeros((4, 50))
    outputs = torch.tensor([[5, -1, -1], [3, 9, -1]], dtype=torch.int32)
    batch = SimpleNamespace(req_ids=["b", "a"], vocab_size=50,
                            temperature_cpu=np.array([0.8, 0.8], dtype=np.float32),
                            top_p_cpu=np.ones(2, dtype=np.float32),
                            top_k_cpu=np.full(2, 50, dtype=np.int32))
    sampler, runner = _fake_vllm(monkeypatch, outputs, batch)
    from specscope.hooks.engines import vllm

    rec = Recorder(run_record)
    vllm.install(rec)
    meta = SimpleNamespace(num_draft_tokens=[0, 2], max_spec_len=2,
                           draft_token_ids=torch.tensor([3, 4]))
    sampler().forward(meta, None, logits.clone(), SimpleNamespace(all_greedy=False))  # warm-up
    rec.drain(wait=True)
    draft_probs = torch.full((2, 50), 0.5 / 48)
    draft_probs[0, 3] = draft_probs[1, 4] = 0.5
    draft_probs[0, 0] = draft_probs[1, 0] = 0.5 - 0.5 / 48  # each row sums to 1
    with forbid_sync():
        runner()._sample(logits.clone(), meta, draft_probs)
    (step,) = [r for r in rec.drain(wait=True) if isinstance(r, schema.VerifyStepRecord)]
    (e,) = step.entries
    assert e.num_accepted == 1
    # the residual max(p - q, 0) with p uniform: the 48 tokens but 0 and 4 (where q > p) hold
    # the same mass, all tied with the replacement: its mid-rank PIT is 1/2, known only from
    # the draft's whole distribution
    assert e.resid_pit == pytest.approx(0.5, abs=1e-4)


def test_an_engine_process_run_starts_at_the_process_start(tmp_path, monkeypatch):
    """The run record of a hooked engine process carries the process's start (its uptime's
    origin), as the system has it; a restarted engine is a new process with a later one."""
    import psutil

    from specscope.hooks import engines
    from specscope.io.trace import read_trace

    monkeypatch.delenv("SPECSCOPE_COLLECTOR", raising=False)
    monkeypatch.setenv("SPECSCOPE_TRACE_DIR", str(tmp_path))
    monkeypatch.setenv("SPECSCOPE_RUN_ID", "uptime")
    recorder = engines.default_recorder("vllm", engine_version="0.0")
    recorder.close()
    (run,) = [r for f in tmp_path.glob("*.jsonl") for r in read_trace(f).records
              if isinstance(r, schema.RunRecord)]
    assert abs(run.started_ns / 1e9 - psutil.Process().create_time()) < 0.05
    assert engines.process_started_ns(1) < run.started_ns  # init started first
    assert engines.process_started_ns(10**9) == 0  # no such process: unknown, never a guess
