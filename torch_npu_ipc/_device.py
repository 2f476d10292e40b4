"""Normalizing device arguments the way torch.npu does, with clear errors; torch_npu's queue settings."""

from __future__ import annotations

import os
import re

import torch
import torch_npu


def npu_index(device: int | str | torch.device | None, *, what: str = "device") -> int:
    """Return the NPU index named by ``device`` (``None`` = the current device).

    Raises:
        TypeError: for an argument that is not an int, str, torch.device or None.
        ValueError: for a non-NPU device or an index out of range.
    """
    if device is None:
        return torch.npu.current_device()
    if isinstance(device, bool):
        raise TypeError(f"{what} must be an int, str or torch.device, got bool")
    if isinstance(device, int):
        index = device
    elif isinstance(device, (str, torch.device)):
        try:
            dev = torch.device(device)
        except RuntimeError as exc:  # torch's parse error for a malformed string
            raise ValueError(f"{what}: {exc}") from None
        if dev.type != "npu":
            raise ValueError(f"{what} must be an NPU device, got {dev}")
        index = torch.npu.current_device() if dev.index is None else dev.index
    else:
        raise TypeError(f"{what} must be an int, str or torch.device, got {type(device).__name__}")
    count = torch.npu.device_count()
    if not 0 <= index < count:
        raise ValueError(f"{what} npu:{index} does not exist ({count} NPU device(s) visible)")
    return index


def stream_triple(stream: torch.npu.Stream) -> tuple[int, int, int]:
    """Return the (stream_id, device_index, device_type) triple the C++ core identifies streams by."""
    return (stream.stream_id, stream.device_index, stream.device_type)


def _env_int(name: str, default: int) -> int:
    """The leading integer of environment variable ``name``, as torch_npu reads it (``default`` without one)."""
    number = re.match(r"\s*[+-]?\d+", os.environ.get(name, ""))
    return default if number is None else int(number.group())


def task_queue_on() -> bool:
    """Whether torch_npu runs ops through its task queue (``TASK_QUEUE_ENABLE`` 1 or 2).

    torch_npu 2.13 says so itself (``torch_npu.npu.get_task_queue_enable``);
    older releases (2.7.1) have no getter, and the variables are read the way
    they read them: ``TASK_QUEUE_ENABLE`` defaults to 1, and
    ``ASCEND_LAUNCH_BLOCKING=1`` turns the queue off.
    """
    getter = getattr(torch_npu.npu, "get_task_queue_enable", None)
    if getter is not None:
        return getter() != 0
    return _env_int("ASCEND_LAUNCH_BLOCKING", 0) != 1 and _env_int("TASK_QUEUE_ENABLE", 1) != 0


def task_queue_off_cause() -> str:
    """The setting that turns torch_npu's task queue off, for messages (call when it is off)."""
    return "ASCEND_LAUNCH_BLOCKING=1" if _env_int("ASCEND_LAUNCH_BLOCKING", 0) == 1 else "TASK_QUEUE_ENABLE=0"


def per_stream_queue_on() -> bool:
    """Whether torch_npu runs one task queue per stream (``PER_STREAM_QUEUE`` non-zero, task queue on)."""
    return _env_int("PER_STREAM_QUEUE", 0) != 0 and task_queue_on()
