"""Cross-device ``Tensor.to()`` / ``copy_()`` between NPUs, synchronized by events.

After ``import torch_npu_ipc``, a copy from ``npu:S`` to ``npu:D`` (``S != D``)
runs as a two-way event barrier, without blocking the host::

    E1 recorded on D's current stream; S's current stream waits on E1
    aclrtMemcpyAsync(DEVICE_TO_DEVICE) on S's current stream
    E2 recorded on S's current stream; D's current stream waits on E2

How it is hooked: the C++ core registers boxed kernels for ``aten::copy_``
and ``aten::_to_copy`` under the ``PrivateUse1`` dispatch key, shadowing
torch_npu's. Autograd, ADInplaceOrView and the other keys above
``PrivateUse1`` are untouched, so gradients flow through the copy as before.
Every call that is not an NPU-to-other-NPU copy (same device, H2D, D2H,
private NPU formats, sparse/quantized, conjugate views, devices without peer
access) is handed to torch_npu's own kernel, captured before the hook was
installed. :func:`disable` deregisters the hook, which restores torch_npu's
kernels.

Turning it off: ``TORCH_NPU_IPC_COPIES=0`` in the environment before
``import torch_npu_ipc``, or :func:`disable` at any time.
``TORCH_NPU_IPC_COPIES=sync`` keeps the hook but synchronizes the two streams
from the host instead of using events (the behaviour of older torch_npu, and
the automatic fallback where interprocess events are unsupported).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from torch_npu_ipc import _C

ENV_VAR = "TORCH_NPU_IPC_COPIES"

__all__ = ["ENV_VAR", "disable", "disabled", "enable", "is_enabled", "status"]


def enable(synchronize: bool = False) -> None:
    r"""Route cross-device NPU copies through the plugin's event barrier.

    Idempotent; calling it again switches the mode.

    Args:
        synchronize (bool, optional): if ``True``, the hook synchronizes the
            source and destination streams from the host instead of using
            events (default: ``False``).

    Raises:
        TypeError: if ``synchronize`` is not a bool.
    """
    if not isinstance(synchronize, bool):
        raise TypeError(f"synchronize must be a bool, got {type(synchronize).__name__}")
    _C._copies_enable(synchronize)


def disable() -> None:
    r"""Remove the hook: ``Tensor.to()`` and ``copy_()`` run torch_npu's own kernels again."""
    _C._copies_disable()


def is_enabled() -> bool:
    r"""Return ``True`` while the hook is installed."""
    return bool(_C._copies_enabled())


_DISABLED_LOCK = threading.Lock()
_disabled_depth = 0  # threads inside disabled(), guarded by _DISABLED_LOCK
_disabled_saved: tuple[bool, str] = (False, "events")  # the state the first of them found


@contextmanager
def disabled() -> Iterator[None]:
    r"""Context manager running its body with the hook removed.

    The hook is process-wide, unlike ``torch.no_grad``'s per-thread mode:
    while any thread is inside ``disabled()``, copies in every thread run
    torch_npu's own kernels. When the last thread inside leaves, the hook is
    back in the state the first one found (on or off, and its mode), whatever
    the bodies switched in between; threads entering and leaving in any order
    cannot leave it off.
    """
    global _disabled_depth, _disabled_saved
    with _DISABLED_LOCK:
        if _disabled_depth == 0:
            _disabled_saved = (is_enabled(), _C._copies_mode())
        _disabled_depth += 1
        disable()
    try:
        yield
    finally:
        with _DISABLED_LOCK:
            _disabled_depth -= 1
            if _disabled_depth == 0:
                was, mode = _disabled_saved
                if was or _C._copies_mode() != mode:
                    enable(synchronize=mode == "synchronize")
                if not was:
                    disable()


def status() -> dict[str, Any]:
    r"""Return the state of cross-device copies, for ``doctor`` and debugging.

    Returns:
        dict: ``enabled`` (bool), ``mode`` (``"events"`` or ``"synchronize"``:
        the mode asked for), ``path`` (what copies actually do: ``"events"``,
        ``"synchronize"`` or ``"torch_npu"`` when the hook is off), ``queued``
        (the barrier's runtime calls go through torch_npu's task queues, so
        the caller never waits for them; ``False`` with ``TASK_QUEUE_ENABLE=0``,
        ``ASCEND_LAUNCH_BLOCKING=1`` or a synchronously launched current
        stream, where they are issued from the calling thread),
        ``fallback_reason`` (why events cannot be used here, ``""`` when they
        can), ``dispatch_key`` (where the hook registers: ``"PrivateUse1"``,
        replacing torch_npu's kernels, on torch >= 2.9; ``"BackendSelect"``,
        just above every backend, on older torch, which cannot call a kernel
        it shadows), ``env`` (the value of ``TORCH_NPU_IPC_COPIES``) and the
        counters ``event_copies``, ``sync_copies``, ``delegated`` (calls
        handed to torch_npu's kernel), ``signal_wait_ns`` (time torch_npu's
        queue threads spent, inside event-barrier copies, waiting for the
        other device's queue to issue its half of the barrier; the calling
        thread never waits for a queue), ``queue_full_waits`` (copies that
        waited because 128 earlier ones were still queued) and
        ``out_of_events_copies`` (copies that synchronized because a device
        had no IPC event left, with one ``UserWarning`` per such episode;
        events are used again as soon as the device has some).
    """
    enabled = is_enabled()
    mode = _C._copies_mode()
    reason = _C._copies_event_unsupported_reason(torch.npu.current_device())
    if not enabled:
        path = "torch_npu"
    elif mode == "synchronize" or reason:
        path = "synchronize"
    else:
        path = "events"
    return {
        "enabled": enabled,
        "mode": mode,
        "path": path,
        "queued": bool(_C._copies_queued()),
        "fallback_reason": reason,
        "dispatch_key": _C._copies_dispatch_key(),
        "env": os.environ.get(ENV_VAR, ""),
        **_C._copies_stats(),
    }


def install_from_env() -> None:
    r"""Apply ``TORCH_NPU_IPC_COPIES`` (called by ``import torch_npu_ipc``).

    ``1`` / unset: event barrier; ``0``: hook off; ``sync``: hook on, host
    synchronize.

    Raises:
        ValueError: for any other value.
    """
    value = os.environ.get(ENV_VAR, "1").strip().lower()
    if value in ("", "1", "on", "events"):
        enable()
    elif value in ("sync", "synchronize"):
        enable(synchronize=True)
    elif value in ("0", "off"):
        disable()
    else:
        raise ValueError(f"{ENV_VAR} must be '1', '0' or 'sync', got {value!r}")
