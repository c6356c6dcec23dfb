"""Fixtures for the real SGLang tests (imported by them; conftest.py stays the shared one): its
environment, SmolLM2 as SGLang loads it, the launcher with the sgl_kernel stand-in, and servers
started under ``specscope wrap`` and stopped by their PIDs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specscope.serving.sglang import SglangServer, sglang_checkpoint, sglang_python, speculative_args
from tests.conftest import ROOT

LAUNCHER = Path(__file__).with_name("sglang_cpu") / "launch.py"


@pytest.fixture(scope="session")
def sglang_env() -> Path:
    python = sglang_python(os.environ.get("SPECSCOPE_SGLANG_PYTHON")) or \
        sglang_python(str(ROOT / ".venv-sglang" / "bin" / "python"))
    if python is None:
        if os.environ.get("CI") or os.environ.get("SPECSCOPE_REQUIRE_ENGINES"):
            pytest.fail("SGLang's environment is missing in CI: `make test` builds .venv-sglang")
        pytest.skip("SGLang's environment is missing: `make sglang-env` builds .venv-sglang "
                    "(or set SPECSCOPE_SGLANG_PYTHON)")
    return python


@pytest.fixture(scope="session")
def sglang_model(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct, the project's converted copy, as SGLang loads it."""
    from specscope.engine.models import smollm2_dir

    return sglang_checkpoint(smollm2_dir(), tmp_path_factory.mktemp("sglang") / "smollm2")


def sglang_server(python: Path, model: Path, folder: Path, method: str | None, *,
                  repaired: bool | Path = False, wrap: bool = True,
                  draft: Path | None = None) -> SglangServer:
    """A server for ``method`` (``STANDALONE``: a copy of the target drafting a chain of 3;
    ``EAGLE3``: ``draft``'s head, a chain of 3; ``NGRAM``: 8 draft tokens; None: no
    speculation) with its log, traces and files in ``folder``; ``repaired`` switches the
    stand-in's repaired CPU verify on (True) or names the file that switches it at run time
    (``1`` in it: repaired)."""
    folder.mkdir(parents=True, exist_ok=True)
    # SGLang's EAGLE-family verify wraps small helpers in torch.compile: on these CPUs the first
    # verify stalls about 70 s compiling them, and new batch shapes recompile; eager is the same
    # arithmetic, started in about half the time
    env = {"TORCHDYNAMO_DISABLE": "1"}
    if repaired:
        env["SGLANG_STANDIN_REPAIRED_VERIFY"] = "1" if repaired is True else str(repaired)
    return SglangServer(model=model, spec=speculative_args(method, draft=draft or model), python=python,
                        launcher=LAUNCHER, work_dir=folder, log=folder / "server.log",
                        wrap=wrap, env=env)


#: the target's layers whose hidden states an EAGLE3 head reads (low, middle, high)
EAGLE3_AUX_LAYERS = (1, 14, 26)


def eagle3_head(target: Path, folder: Path, seed: int = 0) -> Path:
    """A one-layer EAGLE3 draft head for ``target`` (architecture ``LlamaForCausalLMEagle3``),
    its weights random (normal, std 0.02; norms 1): SGLang's EAGLE3 path end to end, with an
    acceptance near 0. Written once into ``folder`` as SGLang loads a draft: ``config.json`` and
    ``model.safetensors`` (the legacy ``midlayer.*`` names real heads ship with); the
    embeddings are the target's (SGLang shares them)."""
    import json

    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "model.safetensors").exists():
        return folder
    config = json.loads((target / "config.json").read_text())
    h, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    hd, inter, vocab = config.get("head_dim") or h // heads, config["intermediate_size"], config["vocab_size"]
    config.update(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                  tie_word_embeddings=False, draft_vocab_size=vocab,
                  eagle_config={"eagle_aux_hidden_state_layer_ids": list(EAGLE3_AUX_LAYERS)})
    g = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)  # noqa: E731
    weights = {
        "midlayer.self_attn.q_proj.weight": normal(heads * hd, 2 * h),
        "midlayer.self_attn.k_proj.weight": normal(kv * hd, 2 * h),
        "midlayer.self_attn.v_proj.weight": normal(kv * hd, 2 * h),
        "midlayer.self_attn.o_proj.weight": normal(h, heads * hd),
        "midlayer.mlp.gate_proj.weight": normal(inter, h),
        "midlayer.mlp.up_proj.weight": normal(inter, h),
        "midlayer.mlp.down_proj.weight": normal(h, inter),
        "midlayer.input_layernorm.weight": ones(h),
        "midlayer.hidden_norm.weight": ones(h),
        "midlayer.post_attention_layernorm.weight": ones(h),
        "fc.weight": normal(h, 3 * h),
        "norm.weight": ones(h),
        "lm_head.weight": normal(vocab, h),
    }
    save_file(weights, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder
