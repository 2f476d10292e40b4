"""Pickling support: events travel through torch.multiprocessing queues and Process arguments."""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing.reductions as torch_reductions
import torch_npu

from torch_npu_ipc.events import Event


def rebuild_event(device: int, handle: bytes) -> Event:
    """Reopen an event in the receiving process (the inverse of :func:`reduce_event`)."""
    return Event.from_ipc_handle(device, handle)


def reduce_event(event: torch_npu.npu.Event) -> tuple[Callable[..., Any], tuple[int, bytes]]:
    """Return ``(rebuild_event, (device, handle))`` for pickling an interprocess event.

    Accepts this package's :class:`Event` and torch_npu's native interprocess
    events (their handles are the same ACL handles); either is rebuilt as a
    :class:`torch_npu_ipc.Event`.

    Raises:
        RuntimeError: for an event that was not created with ``interprocess=True``.
    """
    if isinstance(event, Event):
        if not event.interprocess:
            raise RuntimeError("only an Event created with interprocess=True can be sent to another process")
        handle = event.ipc_handle()
        return rebuild_event, (event.device.index, handle)
    handle = event.ipc_handle()  # torch_npu's native interprocess event
    device = event.device
    return rebuild_event, (device.index if isinstance(device, torch.device) else int(device), handle)


def register() -> None:
    """Register the reductions with torch.multiprocessing (done on ``import torch_npu_ipc``)."""
    ForkingPickler.register(Event, reduce_event)
    torch_reductions.reduce_event = reduce_event
