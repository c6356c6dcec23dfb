"""A test fixture, never part of specscope: plain-torch stand-ins for the ``sgl_kernel`` CPU ops
that SGLang 0.5.21 calls when it serves a small dense model on a CPU with speculative decoding
(``SGLANG_USE_CPU_ENGINE=1``). No CPU build of sgl-kernel exists on the registries; these follow
the semantics of sgl-kernel's CPU sources (``csrc/cpu/spec.cpp``, ``decode.cpp``, ``extend.cpp``)
and SGLang's callers, one op at a time, slowly and simply.

An op SGLang asks for that the stand-in lacks fails loudly: the attribute error names the op
and the stand-in, and a line on stderr says the same (an ``ImportError`` swallowed by a caller's
fallback still leaves the line in the server log).
"""

from __future__ import annotations

import sys

from ._attention import decode_attention_cpu, extend_attention_cpu
from ._cache import (assign_draft_cache_locs_contiguous_cpu, assign_extend_cache_locs_cpu,
                     assign_req_to_token_pool_cpu, build_draft_decode_metadata_cpu,
                     copy_all_layer_kv_cache_cpu, fill_accept_out_cache_loc_cpu,
                     fill_bonus_tokens_cpu)
from ._sampling import top_k_renorm_prob, top_p_renorm_prob, tree_speculative_sampling_target_only
from ._tree import (build_tree_kernel_efficient_cpu, reconstruct_indices_from_tree_mask,
                    verify_tree_greedy_cpu)

__version__ = "0.0.0+cpu-standin"
STANDIN = True

#: ops SGLang looked up and the stand-in does not have, in the order asked
MISSING: list[str] = []


class MissingOpError(AttributeError):
    """SGLang asked for an sgl_kernel op that the CPU stand-in does not implement."""


def _missing(namespace: str, name: str) -> MissingOpError:
    message = (f"{namespace}.{name}: this op is not in the sgl_kernel CPU stand-in "
               "(tests/engines/sglang_cpu); SGLang asked for it")
    if name not in MISSING:
        MISSING.append(name)
        print(f"sgl_kernel stand-in: missing op {namespace}.{name}", file=sys.stderr, flush=True)
    return MissingOpError(message)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise _missing("sgl_kernel", name)


def _register_torch_ops() -> None:
    """``torch.ops.sgl_kernel.<op>``: the attention ops SGLang's ``intel_amx`` backend binds."""
    import torch

    namespace = torch.ops.sgl_kernel
    for fn in (decode_attention_cpu, extend_attention_cpu):
        setattr(namespace, fn.__name__, fn)


_register_torch_ops()
