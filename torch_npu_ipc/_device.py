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
        dev = torch.device(device)
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


def per_stream_queue_on() -> bool:
    """Whether torch_npu runs one task queue per stream (``PER_STREAM_QUEUE`` non-zero, task queue on)."""
    # A leading integer, as torch_npu reads it.
    number = re.match(r"\s*[+-]?\d+", os.environ.get("PER_STREAM_QUEUE", ""))
    return number is not None and int(number.group()) != 0 and torch_npu.npu.get_task_queue_enable() != 0
