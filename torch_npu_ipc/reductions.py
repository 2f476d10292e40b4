"""Pickling support: events travel through torch.multiprocessing queues and Process arguments."""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing.reductions as torch_reductions
import torch_npu

from torch_npu_ipc.events import Event


def rebuild_event(device: int, handle: bytes, blocking: bool = False) -> Event:
    """Reopen an event in the receiving process (the inverse of :func:`reduce_event`)."""
    return Event.from_ipc_handle(device, handle, blocking=blocking)


def reduce_event(event: torch_npu.npu.Event) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """Return ``(rebuild_event, (device, handle, blocking))`` for pickling an interprocess event.

    Accepts this package's :class:`Event`, whose ``blocking`` flag travels
    with it, and torch_npu's native interprocess events (their handles are
    the same ACL handles; ``(device, handle)``); either is rebuilt as a
    :class:`torch_npu_ipc.Event`.

    Raises:
        RuntimeError: for an event that was not created with ``interprocess=True``.
    """
    if isinstance(event, Event):
        if not event.interprocess:
            raise RuntimeError("only an Event created with interprocess=True can be sent to another process")
        handle = event.ipc_handle()
        return rebuild_event, (event.device.index, handle, event._blocking)
    if not hasattr(event, "ipc_handle"):
        raise RuntimeError(
            f"this torch_npu's {type(event).__name__} has no ipc_handle(); "
            "send a torch_npu_ipc.Event(interprocess=True)"
        )
    hint = "create it with torch.npu.Event(interprocess=True) or torch_npu_ipc.Event(interprocess=True)"
    # For an event made without interprocess=True, CANN refuses the handle
    # (107000) and torch_npu raises; a runtime that answers "not supported"
    # instead makes torch_npu log it and return zeros.
    try:
        handle = event.ipc_handle()  # torch_npu's native interprocess event
    except RuntimeError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RuntimeError(
            "only an Event created with interprocess=True can be sent to another process: torch_npu could not "
            f"export this torch.npu.Event's IPC handle ({reason}); {hint}"
        ) from exc
    if not any(handle):
        raise RuntimeError(
            "only an Event created with interprocess=True can be sent to another process: torch_npu returned an "
            f"empty IPC handle for this torch.npu.Event; {hint}"
        )
    device = event.device
    return rebuild_event, (device.index if isinstance(device, torch.device) else int(device), handle)


def register() -> None:
    """Register the reductions with torch.multiprocessing (done on ``import torch_npu_ipc``)."""
    # Exact types: ForkingPickler looks reducers up by type, and torch_npu registered its own for its Event.
    ForkingPickler.register(Event, reduce_event)
    ForkingPickler.register(torch_npu.npu.Event, reduce_event)
    torch_reductions.reduce_event = reduce_event


def register_tensors() -> None:
    """Route NPU tensors and storages through :mod:`torch_npu_ipc.sharing` (CPU ones keep torch's path)."""
    from torch.nn.parameter import Parameter

    from torch_npu_ipc import sharing

    previous_tensor = torch_reductions.reduce_tensor
    previous_storage = torch_reductions.reduce_storage
    if getattr(previous_tensor, "_torch_npu_ipc", False):
        return

    def reduce_tensor(tensor: torch.Tensor) -> Any:
        if tensor.device.type == "npu" and not tensor.is_nested:
            if tensor.layout != torch.strided:
                # Sparse layouts: torch's reducer sends their dense parts, through this function.
                return torch_reductions.reduce_sparse_tensor(tensor)
            return sharing.reduce_npu_tensor(tensor)
        return previous_tensor(tensor)

    def reduce_storage(storage: Any) -> Any:
        if storage.device.type == "npu":
            return sharing.reduce_npu_storage(storage)
        return previous_storage(storage)

    reduce_tensor._torch_npu_ipc = True  # type: ignore[attr-defined]
    torch_reductions.reduce_tensor = reduce_tensor
    torch_reductions.reduce_storage = reduce_storage
    for cls in (*torch._tensor_classes, torch.Tensor, Parameter):
        ForkingPickler.register(cls, reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, reduce_storage)
