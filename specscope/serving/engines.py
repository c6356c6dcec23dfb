"""Real engines as sweep targets: each engine's speculation setting in its own terms, extra
engine flags as grid axes, and a server for one setting started and stopped by PID through the
harnesses (``vllm.py``, ``sglang.py``, ``llamacpp.py``) or any command line (``--launch``).

Speculation texts, per engine (``off``: target-only, always a valid setting):

- ``vllm``: a ``--speculative-config`` JSON, e.g. ``{"method": "ngram",
  "num_speculative_tokens": 4, "prompt_lookup_max": 4}``; ``draft_model`` without a ``model``
  takes the sweep's ``--draft``.
- ``sglang``: ``METHOD:STEPS/TOPK/DRAFT_TOKENS`` (``STANDALONE:3/1/4``, ``EAGLE3:3/1/4``;
  draft tokens include the root, as SGLang counts them) or ``NGRAM:DRAFT_TOKENS``.
- ``llamacpp``: ``TYPE:DEPTH`` (``draft-simple:3``, ``ngram-simple:4``): ``--spec-type`` and
  ``--spec-draft-n-max``; ``draft-simple`` loads the sweep's ``--draft`` GGUF with ``-md``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import registry
from .harness import ServerProcess

#: the engines whose servers specscope starts (those the registry gives a speculation syntax)
ENGINES = tuple(e.name for e in registry.ENGINES if e.spec_syntax)
#: what each engine's server takes as its speculation setting, for errors and --help
SPEC_SYNTAX = {e.name: e.spec_syntax for e in registry.ENGINES if e.spec_syntax}


@dataclass(frozen=True)
class Speculation:
    """One speculation setting of one engine: its name in the sweep (path-safe), the text it
    was given as, and what the harness needs (``detail``)."""

    engine: str
    name: str
    text: str
    detail: tuple[tuple[str, Any], ...] = ()

    @property
    def off(self) -> bool:
        return self.name == "off"

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.detail).get(key, default)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower() or "spec"


def parse_speculation(engine: str, text: str) -> Speculation:
    """``text`` as ``engine``'s speculation setting; a ValueError naming the text and the
    syntax otherwise."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: one of {', '.join(ENGINES)} (or 'reference')")
    text = text.strip()
    if text.lower() in ("off", "none", "0"):
        return Speculation(engine, "off", "off")
    bad = ValueError(f"{engine} speculation setting {text!r}: use {SPEC_SYNTAX[engine]}")
    if engine == "vllm":
        try:
            config = json.loads(text)
        except json.JSONDecodeError:
            raise bad from None
        if not isinstance(config, dict) or not isinstance(config.get("method"), str) or \
                not isinstance(config.get("num_speculative_tokens"), int):
            raise bad
        name = _slug(f"{config['method']}-k{config['num_speculative_tokens']}")
        return Speculation(engine, name, json.dumps(config, sort_keys=True),
                           (("config", json.dumps(config, sort_keys=True)),))
    method, _, rest = text.partition(":")
    if engine == "sglang":
        method = method.upper()
        nums = rest.split("/") if rest else []
        try:
            values = [int(v) for v in nums]
        except ValueError:
            raise bad from None
        if method == "NGRAM" and len(values) == 1 and values[0] >= 2:
            return Speculation(engine, f"ngram-{values[0]}", text,
                               (("method", method), ("draft_tokens", values[0])))
        if method in ("STANDALONE", "EAGLE", "EAGLE3") and len(values) == 3 and \
                values[0] >= 1 and values[1] >= 1 and values[2] >= 2:
            steps, topk, draft_tokens = values
            return Speculation(engine, _slug(f"{method}-{steps}-{topk}-{draft_tokens}"), text,
                               (("method", method), ("steps", steps), ("topk", topk),
                                ("draft_tokens", draft_tokens)))
        raise bad
    try:
        depth = int(rest)
    except ValueError:
        raise bad from None
    if not method or depth < 1:
        raise bad
    return Speculation(engine, _slug(f"{method}-{depth}"), text,
                       (("spec_type", method), ("depth", depth)))


@dataclass(frozen=True)
class Axis:
    """An engine flag swept over values (``--axis max-num-seqs=8,32``; the leading dashes may
    be left out, as the command line needs them left out or joined: ``--axis=--flag=...``):
    ``on`` passes the
    flag alone, ``off`` leaves it out, anything else passes ``FLAG VALUE``."""

    flag: str
    values: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> "Axis":
        flag, eq, values = text.strip().partition("=")
        vals = tuple(v.strip() for v in values.split(",") if v.strip())
        flag = flag if flag.startswith("-") else "--" + flag
        if len(flag) < 3 or not eq or not vals:
            raise ValueError(f"axis {text!r}: use FLAG=VALUE[,VALUE...], e.g. "
                             "'--max-num-seqs=8,32' or '--enable-dp-attention=on,off'")
        return cls(flag.strip(), vals)

    @staticmethod
    def args(flag: str, value: str) -> list[str]:
        if value == "off":
            return []
        return [flag] if value == "on" else [flag, value]


@dataclass
class EngineOptions:
    """What every server of a sweep shares: the model (a checkpoint folder for vLLM and SGLang,
    a GGUF file for llama.cpp), the draft (vLLM ``draft_model``, SGLang's EAGLE-family methods,
    llama.cpp ``draft-simple``; SGLang's STANDALONE and llama.cpp default to the model itself),
    the engine's interpreter, and a command template (``launch``) or SGLang launcher script."""

    model: Path
    draft: Path | None = None
    python: Path | None = None
    launcher: Path | None = None  #: SGLang: a script run instead of -m sglang.launch_server
    launch: str = ""  #: any server command line with {port} and {spec} (and {model})
    hooks: bool = True  #: specscope inside where it can be (vLLM plugin, SGLang wrap)
    #: the target's dtype (vLLM's and SGLang's harnesses serve bfloat16): its tie margin says
    #: whether a greedy answer differing from target-only flipped a near-tie
    dtype: str = "bfloat16"
    max_model_len: int = 1024
    env: dict[str, str] = field(default_factory=dict)


def resolve_models(engine: str, model: str, draft: str | None,
                   cache: Path | None = None) -> tuple[Path, Path | None]:
    """The model and draft as ``engine`` loads them: ``smollm2`` is the project's converted
    SmolLM2-135M-Instruct (its GGUF file for llama.cpp; a folder SGLang reads for SGLang);
    ``int:4`` (and the other draft kinds ``engine.models`` makes) its draft copy for vLLM;
    anything else a path, taken as given."""
    from ..engine import models

    def one(name: str) -> Path:
        if name == "smollm2":
            if engine == "llamacpp":
                return models.smollm2_gguf()
            if engine == "sglang":
                from .sglang import sglang_checkpoint

                return sglang_checkpoint(models.smollm2_dir(), (cache or models.cache_dir())
                                         / "sglang-smollm2")
            return models.smollm2_dir()
        if ":" in name and not Path(name).exists():
            return models.smollm2_draft_dir(name)
        path = Path(name)
        if not path.exists():
            raise FileNotFoundError(f"model {name!r}: no such file or folder")
        return path

    return one(model), (one(draft) if draft else None)


def engine_server(engine: str, spec: Speculation, flags: list[str], folder: Path, run_id: str,
                  options: EngineOptions, *, slots: int = 4) -> ServerProcess:
    """A server (not started) for one setting, its log and trace in ``folder``; its in-engine
    records (where specscope sits inside) name the run ``run_id``."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**options.env, "SPECSCOPE_RUN_ID": run_id}
    if options.launch:
        return CommandServer(template=options.launch, spec_args=spec_args(engine, spec, options),
                             model_path=options.model, trace_dir=folder / "trace",
                             log=folder / "server.log", env=env, extra_args=list(flags))
    if engine == "vllm":
        from .vllm import VllmServer

        cfg = None if spec.off else json.loads(spec.get("config"))
        if cfg is not None and cfg.get("method") in ("draft_model", "eagle", "eagle3") and \
                "model" not in cfg:
            if options.draft is None:
                raise ValueError(f"{spec.text}: {cfg['method']} needs --draft (or a 'model' key)")
            cfg["model"] = str(options.draft)
        return VllmServer(model=options.model, spec=cfg, python=options.python,
                          trace_dir=folder / "trace", hooks=options.hooks, log=folder / "server.log",
                          max_model_len=options.max_model_len, env=env, extra_args=list(flags))
    if engine == "sglang":
        from .sglang import SglangServer

        return SglangServer(model=options.model, spec=spec_args(engine, spec, options),
                            python=options.python, launcher=options.launcher, work_dir=folder,
                            wrap=options.hooks, log=folder / "server.log", env=env,
                            extra_args=list(flags))
    if engine != "llamacpp":
        raise ValueError(f"engine {engine!r}: no server harness (one of {', '.join(ENGINES)})")
    from .llamacpp import LlamaCppServer

    spec_type = "none" if spec.off else spec.get("spec_type")
    draft = (options.draft or options.model) if spec_type == "draft-simple" else None
    return LlamaCppServer(model=options.model, draft=draft, spec_type=spec_type,
                          k=int(spec.get("depth", 3)), log=folder / "server.log", slots=slots,
                          ctx=max(2048, options.max_model_len * slots), extra_args=list(flags))


def spec_args(engine: str, spec: Speculation, options: EngineOptions) -> list[str]:
    """The engine's own command-line flags for ``spec`` (what ``{spec}`` expands to)."""
    if spec.off:
        return []
    if engine == "vllm":
        return ["--speculative-config", spec.get("config")]
    if engine == "sglang":
        method = spec.get("method")
        args = ["--speculative-algorithm", method, "--speculative-num-draft-tokens",
                str(spec.get("draft_tokens"))]
        if method == "NGRAM":
            return args
        draft = options.draft or options.model
        return args + ["--speculative-draft-model-path", str(draft), "--speculative-num-steps",
                       str(spec.get("steps")), "--speculative-eagle-topk", str(spec.get("topk"))]
    args = ["--spec-type", spec.get("spec_type"), "--spec-draft-n-max", str(spec.get("depth"))]
    if spec.get("spec_type") == "draft-simple":
        args = ["-md", str(options.draft or options.model)] + args
    return args


@dataclass
class CommandServer(ServerProcess):
    """Any server command line (``template`` with ``{port}``, ``{spec}`` and ``{model}``; the
    point's engine flags appended), answering ``/health`` on 127.0.0.1; ``SPECSCOPE_TRACE_DIR`` names ``trace_dir`` for
    specscope inside it (``specscope wrap -- ...``, vLLM's plugin)."""

    template: str = ""
    spec_args: list[str] = field(default_factory=list)
    model_path: Path = Path()
    trace_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)  #: the point's engine flags, appended
    label = "launched server"

    def command(self) -> list[str]:
        try:
            return shlex.split(self.template.format(port=self.port, spec=shlex.join(self.spec_args),
                                                    model=shlex.quote(str(self.model_path)))) \
                + list(self.extra_args)
        except (KeyError, IndexError) as exc:
            raise ValueError(f"--launch {self.template!r}: only {{port}}, {{spec}} and {{model}} "
                             f"are filled in (got {exc})") from None

    def start(self, timeout_s: float = 300.0, env: dict[str, str] | None = None,
              new_session: bool = True) -> "CommandServer":
        full = dict(os.environ, **self.env)
        if self.trace_dir is not None:
            Path(self.trace_dir).mkdir(parents=True, exist_ok=True)
            full["SPECSCOPE_TRACE_DIR"] = str(self.trace_dir)
        super().start(timeout_s, env=env or full, new_session=new_session)
        return self
