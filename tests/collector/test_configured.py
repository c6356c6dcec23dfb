"""Forced acceptance and lossy verification by configuration (or, for forced, by its
fingerprint): such runs raise no acceptance or sampling-truth alarm, say why, and a clean run is
never labelled."""

from __future__ import annotations

import dataclasses

from specscope import schema
from specscope.collector.configured import configured, looks_forced
from specscope.collector.report import build_report
from specscope.collector.service import Collector


def _run(rid, **labels):
    return schema.RunRecord(run_id=rid, config_id=rid, algorithm="eagle", num_steps=3, topk=1,
                            num_verify_tokens=4, backend="cuda", model=f"m-{rid}", labels=labels)


def _counts(rid, per_pos, drafts=400, t=1):
    acc = [round(p * drafts) for p in per_pos]
    return schema.SpecCountsRecord(run_id=rid, t_ns=t, num_drafts=drafts, num_draft_tokens=3 * drafts,
                                   num_accepted=sum(acc), accepted_per_pos=tuple(acc),
                                   source="test")


def test_configuration_and_fingerprint_say_forced_and_a_clean_run_is_never_labelled():
    assert configured(_run("a", rejection_sample_method="synthetic"))[0] == "forced"
    assert configured(_run("b", rejection_sample_method="block"))[0] == "lossy"
    env = dataclasses.replace(_run("c"), env_flags={"SGLANG_SIMULATE_ACC_LEN": "2.5"})
    assert "SGLANG_SIMULATE_ACC_LEN=2.5" in configured(env)[1]
    assert configured(_run("d", rejection_sample_method="standard")) == ("", "")
    # vLLM's minimum-variance schedule for acceptance length 2.5 at k = 3: [1, 0.5, 0]
    assert looks_forced([1.0, 0.5, 0.0], 400) and looks_forced([1.0, 1.0, 0.0], 400)
    # what the real vLLM CPU build's defective verify gives (478 drafts): a broken run, not a
    # forced one; a forced run set below acceptance length 2 is known from its configuration
    assert not looks_forced([0.0564854, 0.0, 0.0], 478)
    assert not looks_forced([1.0, 0.5, 0.0], 50)  # too few drafts to tell
    assert not looks_forced([0.81, 0.55, 0.31], 10_000)  # a draft model against its target
    assert not looks_forced([1.0, 1.0, 1.0], 10_000)  # a draft identical to its target
    assert not looks_forced([0.9, 0.4, 0.0], 10_000)  # two fractions


def test_a_forced_run_is_speed_only_in_the_report_and_raises_no_acceptance_alarm():
    records = [_run("forced", rejection_sample_method="synthetic"), _counts("forced", [1.0, 1.0, 0.97]),
               _run("printed"), _counts("printed", [1.0, 0.5, 0.0]),
               _run("clean"), _counts("clean", [0.8, 0.5, 0.3])]
    secs = {s["run"]["run_id"]: s for s in build_report(records)["runs"]}
    assert secs["forced"]["verification"]["kind"] == "forced"
    assert "rejection_sample_method: synthetic" in secs["forced"]["verification"]["why"]
    assert secs["printed"]["verification"]["kind"] == "forced"  # by its fingerprint
    assert secs["clean"]["verification"] == {"kind": "measured", "why": None}
    # live: acceptance length 3.97 of k + 1 = 4 alarms on a measured run, not on a forced one
    from specscope.collector.detectors import AcceptanceLengthBoundsDetector

    collector = Collector(window_s=1.0, bounds=AcceptanceLengthBoundsDetector())
    collector.observe([_run("forced", rejection_sample_method="synthetic"),
                       _counts("forced", [1.0, 1.0, 0.97]),
                       _run("measured"), _counts("measured", [1.0, 1.0, 0.97])])
    kinds = {(key[5], a.kind) for key, a in collector.tick()}
    assert ("m-measured", "acceptance_length_near_max") in kinds
    assert not any(model == "m-forced" for model, _ in kinds)


def test_lossy_verification_turns_sampling_truth_inconclusive_with_its_reason(tiny, tmp_path):
    """The silent-greedy fault fails sampling truth; the same run configured for block
    verification says the check does not apply instead of FAIL."""
    from specscope.engine.decoder import SpecConfig
    from specscope.engine.workload import WorkloadSpec, run_workload
    from specscope.io.trace import read_trace

    path = run_workload(tiny, SpecConfig(num_steps=3, fault="silent_greedy"),
                        WorkloadSpec(requests=4, max_new_tokens=24, temperature=0.8, reference=False),
                        tmp_path / "t.jsonl", progress=False)
    records = read_trace(path).records

    def truth(recs):
        (sec,) = build_report(recs)["runs"]
        return {t["mode_requested"]: t["state"] for t in sec["sampling_truth"]}

    assert truth(records)["speculative-sampling"] == "fail"
    block = [dataclasses.replace(r, labels={**r.labels, "rejection_sample_method": "block"})
             if isinstance(r, schema.RunRecord) else r for r in records]
    assert truth(block)["speculative-sampling"] == "inconclusive"
    (sec,) = build_report(block)["runs"]
    assert sec["verification"]["kind"] == "lossy" and not [
        a for a in sec["anomalies"] if a["kind"] == "silent_greedy"]


def test_vllms_synthetic_configuration_reaches_the_run_record_and_labels_it():
    """The vLLM adapter's run record from vLLM's own config objects (the shape of 0.32's
    SpeculativeConfig): synthetic rejection sampling makes the run forced. (vLLM's CPU build
    cannot decode in this mode — its CPU rejection kernels assert on it — so no real server.)"""
    from types import SimpleNamespace

    from specscope.hooks.engines.vllm import run_fields

    def config(method):
        spec = SimpleNamespace(num_speculative_tokens=3, method="ngram", model=None,
                               draft_model_config=None, rejection_sample_method=method,
                               draft_sample_method="greedy")
        return SimpleNamespace(model_config=SimpleNamespace(model="/m/smollm2", dtype="bfloat16",
                                                            served_model_name=None),
                               speculative_config=spec)

    forced = schema.RunRecord(run_id="v", **run_fields(config("synthetic")))
    assert configured(forced)[0] == "forced"
    shipped = schema.RunRecord(run_id="v", **run_fields(config("standard")))
    assert configured(shipped) == ("", "")


def test_a_vllm_logs_start_up_arguments_label_the_imported_run(tmp_path):
    """vLLM prints its non-default arguments once at start-up (``api_utils.py``), the speculative
    config among them: a synthetic run's log imports as forced, a block-verified one as lossy,
    a standard one as measured, whatever its windows say."""
    from specscope.importers import import_file

    window = ("(APIServer pid=7) INFO 06-01 10:00:{s:02d} [metrics.py:101] SpecDecoding metrics: "
              "Mean acceptance length: 2.50, Accepted throughput: 15.00 tokens/s, Drafted "
              "throughput: 30.00 tokens/s, Accepted: 150 tokens, Drafted: 300 tokens, Per-position "
              "acceptance rate: 0.700, 0.500, 0.300, Avg Draft acceptance rate: 50.0%\n")
    kinds = {}
    for method in ("synthetic", "block", "standard"):
        extra = ", 'synthetic_acceptance_length': 2.5" if method == "synthetic" else ""
        head = ("(APIServer pid=7) INFO 06-01 09:59:58 [api_utils.py:286] non-default args: "
                "{'model_tag': None, 'host': '127.0.0.1', 'speculative_config': {'method': "
                f"'draft_model', 'model': '/m/draft', 'num_speculative_tokens': 3, "
                f"'rejection_sample_method': '{method}'{extra}}}, 'enforce_eager': True}}\n")
        path = tmp_path / f"{method}.log"
        path.write_text(head + "".join(window.format(s=s) for s in range(10, 40, 10)))
        res = import_file(path)
        (run,) = [r for r in res.records if isinstance(r, schema.RunRecord)]
        assert run.labels["rejection_sample_method"] == method and run.labels["method"] == "draft_model"
        (section,) = build_report(res.records)["runs"]
        kinds[method] = (section["verification"]["kind"], sorted(set(res.traps) & {"forced", "lossy"}))
    assert kinds == {"synthetic": ("forced", ["forced"]), "block": ("lossy", ["lossy"]),
                     "standard": ("measured", [])}
