"""A test utility that fails when code forces a host-device synchronisation.

Imports only stdlib and torch. Use ``with forbid_sync(): recorder.record_verify(...)`` in tests:
any sync-forcing tensor call inside raises SyncError, on the CPU as on a GPU, so a hook that
would stall a CUDA stream is caught on a machine without one.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode


class SyncError(AssertionError):
    """The guarded code called a tensor operation that waits for the device."""


_T = torch.Tensor
#: Calls that copy device data to the host and wait for it, or whose output shape depends on
#: device data (nonzero, masked_select, unique, boolean-mask indexing) and so must wait.
FORBIDDEN = {
    _T.item: "Tensor.item",
    _T.tolist: "Tensor.tolist",
    _T.cpu: "Tensor.cpu",
    _T.numpy: "Tensor.numpy",
    _T.__bool__: "bool(tensor)",
    _T.__int__: "int(tensor)",
    _T.__float__: "float(tensor)",
    _T.__index__: "tensor used as an index",
    _T.nonzero: "Tensor.nonzero",
    torch.nonzero: "torch.nonzero",
    _T.masked_select: "Tensor.masked_select",
    torch.masked_select: "torch.masked_select",
    torch.unique: "torch.unique",
    _T.unique: "Tensor.unique",
    torch.argwhere: "torch.argwhere",
}


def _moves_to_host(args: tuple, kwargs: dict) -> bool:
    """A ``Tensor.to`` call that copies device data to the host (a CPU tensor staying put is not)."""
    src = args[0] if args and isinstance(args[0], torch.Tensor) else None
    for value in list(args[1:]) + [kwargs.get("device")]:
        if isinstance(value, torch.Tensor):
            value = value.device
        if isinstance(value, (str, torch.device)) and torch.device(value).type == "cpu":
            return src is not None and src.device.type != "cpu"
    return False


class SyncGuardMode(TorchFunctionMode):
    """Raises SyncError on any call in FORBIDDEN, a blocking copy to the host, or mask indexing."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None):
        kwargs = kwargs or {}
        name = FORBIDDEN.get(func)
        if name:
            raise SyncError(f"{name} forces a host-device sync inside a guarded hot path")
        if func is _T.to and _moves_to_host(args, kwargs) and not kwargs.get("non_blocking"):
            raise SyncError("Tensor.to('cpu') without non_blocking=True forces a sync")
        if func is _T.copy_ and args and isinstance(args[0], torch.Tensor):
            dst = args[0]
            non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            src = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else None
            crosses = src is not None and src.device.type != "cpu"
            if dst.device.type == "cpu" and crosses and not non_blocking:
                raise SyncError("copy_ into a host tensor without non_blocking=True forces a sync")
        if func is _T.__getitem__ and len(args) > 1 and _has_bool_index(args[1]):
            raise SyncError("boolean-mask indexing has a data-dependent shape and forces a sync")
        return func(*args, **kwargs)


def _has_bool_index(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


@contextlib.contextmanager
def forbid_sync() -> Iterator[None]:
    """Fail on any host-device synchronisation inside the block (CPU and CUDA alike).

    On a CUDA machine this also turns on ``torch.cuda.set_sync_debug_mode("error")`` and makes
    ``torch.cuda.synchronize`` and ``Event/Stream.synchronize`` raise.
    """
    patches: list[tuple[Any, str, Any]] = []
    cuda = torch.cuda.is_available()
    if cuda:
        def _refuse(*_a: Any, **_k: Any) -> None:
            raise SyncError("explicit CUDA synchronize inside a guarded hot path")

        for owner, attr in ((torch.cuda, "synchronize"), (torch.cuda.Event, "synchronize"),
                            (torch.cuda.Stream, "synchronize")):
            patches.append((owner, attr, getattr(owner, attr)))
            setattr(owner, attr, _refuse)
        previous_mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
    try:
        with SyncGuardMode():
            yield
    finally:
        for owner, attr, original in patches:
            setattr(owner, attr, original)
        if cuda:
            torch.cuda.set_sync_debug_mode(previous_mode)
