"""Autograd across devices with torch_npu's task queue on: waits follow records, events outlive waits.

torch_npu 2.13's autograd engine hands a gradient from one device to another
by recording a ``c10::Event`` on the producer's stream, making the consumer's
stream wait on it, and dropping it. With the task queue on
(``TASK_QUEUE_ENABLE=1`` or ``2``, one queue per device) the destroy can reach
the runtime before the other device's queue issued the wait, which then fails
with "aclrtStreamWaitEvent: invalid event handle", and every later op on that
device fails. A backward pass across devices hits it within a few iterations,
with or without torch_npu_ipc's copy hook. Nor is the wait ordered after the
record: when it reaches the runtime first it waits for nothing, and the
consumer reads the gradient before it is written.

``import torch_npu_ipc`` wraps torch_npu's device-guard implementation (what
``c10::Event`` calls) so that a wait on another device's event is queued
behind its record, and destroying an event another device's queue waits on
behind that wait; everything else is forwarded unchanged.
``TORCH_NPU_IPC_EVENT_GUARD=0`` leaves torch_npu's implementation alone. The
ordering is off where it is not needed: with the task queue off, or with
torch_npu's per-stream queues (``PER_STREAM_QUEUE=1``), whose event manager
waits for an event's waits before destroying it.

The wrapper has a second job, in every queue mode: where torch itself
records memory on a stream (a ``torch.futures.Future``'s value on the stream
that waits for it, autograd's buffers), a shared or received block is
recorded the way :mod:`torch_npu_ipc.sharing` routes ``Tensor.record_stream``;
torch_npu's allocator would ignore it.
"""

from __future__ import annotations

import os
from typing import Any

from torch_npu_ipc import _C
from torch_npu_ipc._device import per_stream_queue_on, task_queue_off_cause, task_queue_on

ENV_VAR = "TORCH_NPU_IPC_EVENT_GUARD"

_no_ordering_reason = "not asked for yet"


def install_from_env() -> None:
    r"""Install the wrapper unless ``TORCH_NPU_IPC_EVENT_GUARD=0``, ordering where needed (called on import).

    Raises:
        ValueError: for a value of ``TORCH_NPU_IPC_EVENT_GUARD`` other than ``1`` or ``0``.
    """
    global _no_ordering_reason
    value = os.environ.get(ENV_VAR, "1").strip().lower()
    if value in ("0", "off"):
        _no_ordering_reason = f"{ENV_VAR}={value}"
    elif value not in ("", "1", "on"):
        raise ValueError(f"{ENV_VAR} must be '1' or '0', got {value!r}")
    else:
        queued, per_stream = task_queue_on(), per_stream_queue_on()
        wrapped = _C._event_guard_install(order_events=queued and not per_stream)
        if not queued:
            _no_ordering_reason = f"task queue off ({task_queue_off_cause()}): calls reach the runtime in program order"
        elif per_stream:
            _no_ordering_reason = "PER_STREAM_QUEUE=1: torch_npu destroys an event only once its waits ran"
        elif not wrapped:
            _no_ordering_reason = "this build of torch_npu_ipc targets a torch older than 2.13"
        else:
            _no_ordering_reason = ""


def status() -> dict[str, Any]:
    r"""Return the state of the guard that orders autograd's cross-device event calls across task queues.

    Returns:
        dict: ``ordering`` (bool: the ordering is on), ``reason`` (why it
        is not, ``""`` when it is), ``wrapped`` (bool: the wrapper is in
        torch's guard registry, ordering or not, so torch's own stream
        records of shared memory reach the plugin), ``gated_waits`` (waits
        held until the other device's queue issued the record),
        ``deferred_destroys`` (event destroys queued behind another device's
        wait so far) and ``tracked_events`` (events recorded through it with
        the task queue on and not destroyed yet).
    """
    st = dict(_C._event_guard_stats())
    st["reason"] = "" if st["ordering"] else _no_ordering_reason
    return st
