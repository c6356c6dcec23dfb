"""The sampling class: one code and one name per class, parsed from each engine's parameters
with that engine's own "off" values, and back."""

from __future__ import annotations

import numpy as np
import pytest

from specscope import sampling
from specscope.sampling import GREEDY, SAMPLED, TOP_K, TOP_K_ALL, TOP_P


def test_every_class_round_trips_through_its_name_and_its_request_fields():
    names = [sampling.name(c) for c in sampling.CODES]
    assert len(set(names)) == len(names) == 9
    for c in sampling.CODES:
        assert sampling.of_name(sampling.name(c)) == c
        f = sampling.fields(c)
        assert sampling.code(f["temperature"], f.get("top_p"), f.get("top_k"), f.get("min_p")) == c
    assert names[:2] == ["greedy", "temperature"]
    assert sampling.name(SAMPLED | TOP_P | TOP_K) == "top-p+top-k"
    with pytest.raises(ValueError, match="unknown sampling class 'top-q'"):
        sampling.of_name("top-q")


def test_the_probes_and_the_truth_classes_names_are_the_classes_names():
    from specscope.collector.stats import truth_key
    from specscope.probe.penalties import PENALTIES
    from specscope.probe.workload import CLASSES, UNSET_T, class_code

    assert {k: v for k, v in CLASSES.items() if not k.endswith(UNSET_T)} == {
        "greedy": {"temperature": 0.0}, "temperature": {"temperature": 0.8},
        "top-p": {"temperature": 0.8, "top_p": 0.9}, "top-k": {"temperature": 0.8, "top_k": 20},
        # greedy and temperature, their penalties and min-p floor the only differences
        "penalties": {"temperature": 0.0, "presence_penalty": 1.0, "frequency_penalty": 0.5},
        "min-p": {"temperature": 0.8, "min_p": 0.1}}
    # the temperature left out: the engine's default (vLLM's 1.0) samples
    assert {k: v for k, v in CLASSES.items() if k.endswith(UNSET_T)} == {
        "top-p/unset-t": {"top_p": 0.9}, "top-k/unset-t": {"top_k": 20}}
    for label, body in CLASSES.items():
        code = sampling.code(body.get("temperature"), body.get("top_p"), body.get("top_k"),
                             engine="vllm")
        named = {PENALTIES: "greedy", "min-p": "temperature"}.get(label, label.removesuffix(UNSET_T))
        assert sampling.name(code) == named and code == class_code(label)
    assert truth_key("speculative-sampling", 0.9, 20) == "speculative-sampling+top-p+top-k"
    assert truth_key("target-temperature", 1.0, 0) == "target-temperature"
    assert truth_key("greedy", 0.9, 20) == "greedy"  # a greedy request's truncations do nothing


@pytest.mark.parametrize("engine,params,expected", [
    # SGLang's SamplingParams after it normalises a request: top_k "off" is the whole
    # vocabulary, temperature 0 is stored as top_k 1 with temperature 1.0
    ("sglang", dict(temperature=1.0, top_p=1.0, top_k=TOP_K_ALL, min_p=0.0), "temperature"),
    ("sglang", dict(temperature=1.0, top_p=1.0, top_k=1, min_p=0.0), "greedy"),
    ("sglang", dict(temperature=0.7, top_p=1.0, top_k=-1, min_p=0.0), "temperature"),
    ("sglang", dict(temperature=0.7, top_p=0.9, top_k=20, min_p=0.0), "top-p+top-k"),
    ("sglang", dict(temperature=0.7), "temperature"),
    # vLLM: top_k 0 or -1 off, its input batch holds "off" as the vocabulary size
    ("vllm", dict(temperature=0.8, top_p=1.0, top_k=0, min_p=0.0), "temperature"),
    ("vllm", dict(temperature=0.8, top_k=-1), "temperature"),
    ("vllm", dict(temperature=0.8, top_k=49152, vocab_size=49152), "temperature"),
    ("vllm", dict(temperature=0.8, top_k=1), "top-k"),
    ("vllm", dict(temperature=0.0, top_p=0.9, top_k=20), "greedy"),
    # llama.cpp truncates unless told not to: its defaults are top-k 40, top-p 0.95, min-p 0.05
    ("llamacpp", dict(temperature=0.8), "top-p+top-k+min-p"),
    ("llamacpp", dict(temperature=0.8, top_k=0, min_p=0.0), "top-p"),
    ("llamacpp", dict(temperature=0.8, top_p=1.0, top_k=0, min_p=0.0), "temperature"),
    ("llamacpp", dict(temperature=None), "top-p+top-k+min-p"),
    # specscope's own records: 0 and 1.0 are off; SGLang's "off" read as off there too
    ("", dict(temperature=0.8, top_k=TOP_K_ALL), "temperature"),
    ("", dict(temperature=0.8, top_p=1.0, top_k=0), "temperature"),
])
def test_each_engines_parameters_parse_with_its_own_off_values(engine, params, expected):
    assert sampling.name(sampling.code(engine=engine, **{"temperature": None, **params})) \
        == expected


def test_a_batch_parses_elementwise_as_each_row_alone():
    rng = np.random.default_rng(3)
    t = rng.choice([0.0, 0.7, 1.0], 200)
    p = rng.choice([1.0, 0.9], 200)
    k = rng.choice([-1, 0, 1, 20, TOP_K_ALL], 200)
    m = rng.choice([0.0, 0.05], 200)
    for engine in ("", "vllm", "sglang", "llamacpp"):
        batch = sampling.code(t, p, k, m, engine=engine)
        assert batch.tolist() == [sampling.code(*row, engine=engine)
                                  for row in zip(t.tolist(), p.tolist(), k.tolist(), m.tolist())]
    assert set(sampling.code(t, p, k, m).tolist()) <= set(sampling.CODES)
    assert sampling.code(t, None, None).tolist() == [int(x > 0) for x in t]  # nothing truncates


def test_the_policy_hooks_and_the_collector_class_a_batch_alike():
    """The hooks' statistics policy and the collector's truth classes read one definition:
    a batch's rows fall in the same classes both ways."""
    from specscope import schema
    from specscope.collector.columns import VerifyColumns, observe_columns
    from specscope.collector.stats import SpecStats
    from specscope.hooks.policy import class_codes

    rows = [(0.0, 1.0, 0), (0.8, 1.0, 0), (0.8, 0.9, 0), (0.8, 1.0, 20), (0.8, 0.9, 20),
            (0.8, 1.0, TOP_K_ALL)]
    codes = class_codes(*map(list, zip(*rows)))
    assert codes.tolist() == [GREEDY, SAMPLED, SAMPLED | TOP_P, SAMPLED | TOP_K,
                              SAMPLED | TOP_P | TOP_K, SAMPLED]
    mode = schema.SPECULATIVE_SAMPLING
    entries = tuple(schema.VerifyEntry(
        request_id=f"q{i}", num_drafted=1, num_draft_tokens=1, num_accepted=0, accepted_per_pos=(0,),
        temperature=t, top_p=p, top_k=k, mode_requested=schema.GREEDY if t == 0 else mode,
        mode_used=schema.GREEDY if t == 0 else mode, num_verified=1, num_top1=1,
        expected_top1=0.5, var_top1=0.25) for i, (t, p, k) in enumerate(rows))
    step = schema.VerifyStepRecord(run_id="r", config_id="c", rank=0, step=0, t_ns=1,
                                   batch_size=len(rows), entries=entries)
    truth = SpecStats().observe_all([step]).truth
    assert {k: v.num_verified for k, v in truth.items()} == {
        "greedy": 1, mode: 2, f"{mode}+top-p": 1, f"{mode}+top-k": 1, f"{mode}+top-p+top-k": 1}
    assert set(codes.tolist()) == {
        GREEDY if k == "greedy" else sampling.of_name(k.removeprefix(mode).lstrip("+") or "temperature")
        for k in truth}
    columnar = SpecStats()
    (cols,) = VerifyColumns.from_records([step])
    observe_columns(columnar, cols)
    assert columnar.truth == truth
