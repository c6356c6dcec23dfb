"""Test fixture: start SGLang 0.5.21's server on a CPU without AMX as ``python -m
sglang.launch_server ARGS`` would, in three ways a test needs and a user's command does not.

- The launching process tells SGLang the CPU has AMX (its own platform override), so it keeps the
  ``intel_amx`` attention backend, the only CPU backend with a speculative verify (it would
  otherwise swap in ``torch_native``, whose first verify crashes). The override lives under the
  ``__main__`` guard: the scheduler is a spawned process that re-imports this file and must keep
  the machine's real facts (its layers then use plain torch, not AMX kernels).
- The ops SGLang calls in ``sgl_kernel`` come from the stand-in beside this file.
- ``SGLANG_STANDIN_REPAIRED_VERIFY`` (tests only) repairs CPU verify the way SGLang's ROCm fix
  does: the CPU no longer forces the argmax path, so verify samples the target's own token at
  each position and accepts a draft token only when it equals it. ``1``: from the start; a file
  path: while that file holds ``1`` (read at each verify step, so a test switches one running
  server from as shipped to repaired). Applied at import, so in the spawned scheduler too.
"""

import os
import runpy


def _switched_on(switch: str) -> bool:
    if switch == "1":
        return True
    try:
        with open(switch, encoding="utf-8") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def repair_verify(switch: str) -> None:
    """Verify takes the argmax path only for all-greedy batches, on the CPU as elsewhere, while
    ``switch`` says so; otherwise SGLang's own choice."""
    import sglang.srt.speculative.eagle_utils as eagle_utils

    shipped = eagle_utils._verify_uses_greedy

    def verify_uses_greedy(*, is_all_greedy, is_cpu, is_hip, is_xpu, use_rejection_sampling):
        if _switched_on(switch):
            return bool(is_all_greedy)
        return shipped(is_all_greedy=is_all_greedy, is_cpu=is_cpu, is_hip=is_hip, is_xpu=is_xpu,
                       use_rejection_sampling=use_rejection_sampling)

    eagle_utils._verify_uses_greedy = verify_uses_greedy


if os.environ.get("SGLANG_STANDIN_REPAIRED_VERIFY"):
    repair_verify(os.environ["SGLANG_STANDIN_REPAIRED_VERIFY"])

if __name__ == "__main__":
    from sglang.srt.runtime_context import get_platform

    get_platform()._install(has_amx=True)
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=False)
