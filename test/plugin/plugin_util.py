"""Helpers for the plugin tests: worker orchestration, counters, and disabling torch_npu's native event IPC.

Kept torch-light at import time except for what the workers need anyway; a
spawned worker imports this module (and the test module holding its target)
before it rebuilds its arguments, so anything done at import time here also
happens before an Event passed as a Process argument is rebuilt.
"""

from __future__ import annotations

import ctypes
import gc
import os
import queue
import time
from collections.abc import Callable, Iterable
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
import torch_npu
from helpers import native_event_ipc

import aclsim

# These tests drive simulated device time and read simulator counters.
requires_aclsim = pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)")

# Set (to "1") in the environment of workers that must run without torch_npu's native event IPC.
NO_NATIVE_ENV = "TORCH_NPU_IPC_TEST_NO_NATIVE_EVENT_IPC"
# Whether this torch_npu has event IPC of its own (2.7.1 has not): read before anything is disabled.
NATIVE_EVENT_IPC = native_event_ipc()

# Simulated device work that the consumer must be seen to wait for, and the clock slack allowed.
# Generous, so that a loaded machine still delivers each message well within it.
WORK = 0.5
SLACK = 0.02
# An ACL call that returns at once; anything near WORK means the host blocked.
HOST_FAST = WORK / 2

TIMEOUT = 60.0


class NativeEventIpcDisabled(RuntimeError):
    """Raised by torch_npu's native event IPC entry points while they are disabled."""


def _native_reductions() -> Any:
    """torch_npu's own ``torch_npu.multiprocessing.reductions``, or None (2.6.0 and older have none)."""
    return getattr(getattr(torch_npu, "multiprocessing", None), "reductions", None)


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise NativeEventIpcDisabled("torch_npu's native event IPC entry points are disabled in this test")


def disable_native_event_ipc() -> None:
    """Make every torch_npu native event IPC entry point raise :class:`NativeEventIpcDisabled`.

    Patches ``torch.npu.Event.ipc_handle`` / ``from_ipc_handle``, the same
    methods of the C extension type ``torch_npu._C._NPUEventBase`` (an
    immutable type: its dict is patched directly and the type cache
    invalidated), torch_npu's event reductions and its ForkingPickler entry.
    """
    for cls in {torch.npu.Event, torch_npu.npu.Event}:
        cls.ipc_handle = _refuse  # type: ignore[method-assign]
        cls.from_ipc_handle = classmethod(_refuse)  # type: ignore[method-assign,assignment]
    base = torch_npu._C._NPUEventBase
    type_dict = gc.get_referents(base.__dict__)[0]
    type_dict["ipc_handle"] = _refuse
    type_dict["from_ipc_handle"] = classmethod(_refuse)
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(base))
    native_reductions = _native_reductions()
    if native_reductions is not None:
        native_reductions.rebuild_npu_event = _refuse
        native_reductions._npu_reduce_event = _refuse
    ForkingPickler._extra_reducers[torch_npu.npu.Event] = _refuse


def native_ways_usable() -> bool:
    """True when torch_npu's own event IPC exists here and is not disabled: interop can be tested."""
    return NATIVE_EVENT_IPC and not native_disabled()


def native_disabled() -> bool:
    """True when this process runs with torch_npu's native event IPC disabled."""
    return os.environ.get(NO_NATIVE_ENV) == "1"


def check_native_state() -> None:
    """Assert that the native entry points are disabled exactly when the environment asks for it."""
    probes: list[Callable[[], Any]] = [
        lambda: torch.npu.Event(interprocess=True).ipc_handle(),
        lambda: torch.npu.Event.from_ipc_handle(0, bytes(64)),
        lambda: torch_npu._C._NPUEventBase.ipc_handle(torch.npu.Event(interprocess=True)),
        lambda: torch_npu._C._NPUEventBase.from_ipc_handle(0, bytes(64)),
    ]
    for probe in probes:
        if not NATIVE_EVENT_IPC:  # nothing to disable: the entry points do not exist
            with pytest.raises(AttributeError):
                probe()
        elif native_disabled():
            with pytest.raises(NativeEventIpcDisabled):
                probe()
        else:
            try:
                probe()
            except NativeEventIpcDisabled:  # pragma: no cover - would be a test set-up bug
                raise AssertionError("native event IPC is disabled but should not be") from None
            except RuntimeError:
                pass  # from_ipc_handle of a zero handle: refused by the runtime, as it should be


# A worker module imports this first: disable before any argument is rebuilt.
if native_disabled() and NATIVE_EVENT_IPC:
    disable_native_event_ipc()


def start(target: Callable[..., Any], *args: Any, daemon: bool = True) -> BaseProcess:
    """Start ``target(*args)`` in a spawned process (a daemon unless it starts workers itself)."""
    proc = mp.get_context("spawn").Process(target=target, args=args, daemon=daemon)
    proc.start()
    return proc


def recv(q: Any, procs: Iterable[BaseProcess] = (), timeout: float = TIMEOUT) -> Any:
    """Get from ``q``, failing fast if one of ``procs`` died with an error meanwhile."""
    deadline = time.monotonic() + timeout
    procs = list(procs)
    while True:
        try:
            return q.get(timeout=0.2)
        except queue.Empty:
            pass
        dead = [p for p in procs if p.exitcode not in (None, 0)]
        assert not dead, f"worker(s) failed: {[(p.name, p.exitcode) for p in dead]}"
        assert time.monotonic() < deadline, f"nothing received within {timeout}s"


def streams_per_device(devices: int = 2) -> list[list[torch.npu.Stream]]:
    """Per device: its default stream and two pool streams (the streams the generated programs pick from)."""
    return [[torch.npu.default_stream(d), torch.npu.Stream(d), torch.npu.Stream(d)] for d in range(devices)]


def synchronize_devices(devices: int = 2) -> None:
    """Wait until every stream of the first ``devices`` NPUs ran out."""
    for d in range(devices):
        torch.npu.synchronize(d)


# The simulator's counters of calls that block the host on the device.
HOST_SYNCS = ("aclrtSynchronizeStream", "aclrtSynchronizeEvent", "aclrtSynchronizeDevice")


def host_syncs() -> dict[str, int]:
    """aclsim's counts of the HOST_SYNCS calls so far."""
    c = aclsim.counters()
    return {k: c[k] for k in HOST_SYNCS}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Counter differences (only the non-zero ones)."""
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def assert_stream_wait_only(d: dict[str, int], what: str) -> None:
    """Assert that a counter delta shows a stream wait and no host synchronization."""
    assert d.get("aclrtStreamWaitEvent", 0) >= 1, f"{what}: no aclrtStreamWaitEvent: {d}"
    synced = {k: d[k] for k in HOST_SYNCS if d.get(k)}
    assert not synced, f"{what}: the host synchronized: {d}"


ACL_EVENT_SYNC = 0x1
ACL_ERROR_RT_NO_EVENT_RESOURCE = 207007


class EventHoard:
    """Every local event the current device has left, held until :meth:`release`.

    Needs ``ACLSIM_MAX_EVENTS`` (at most ``limit``) in the environment of the
    process before its first ACL call; creating more than ``limit`` events is
    an assertion failure (the limit was not enforced).
    """

    def __init__(self, limit: int) -> None:
        self._rt = aclsim._env.runtime()
        self._events: list[ctypes.c_void_p] = []
        while len(self._events) <= limit:
            e = ctypes.c_void_p()
            rc = self._rt.aclrtCreateEventExWithFlag(ctypes.byref(e), ctypes.c_uint32(ACL_EVENT_SYNC))
            if rc == ACL_ERROR_RT_NO_EVENT_RESOURCE:
                return
            assert rc == 0, f"aclrtCreateEventExWithFlag failed with {rc}"
            self._events.append(e)
        raise AssertionError(f"more than {limit} events created: ACLSIM_MAX_EVENTS was not enforced")

    def release(self) -> None:
        """Destroy the held events: the device has events again."""
        while self._events:
            assert self._rt.aclrtDestroyEvent(self._events.pop()) == 0


def share_native(t: torch.Tensor) -> tuple[Callable[..., torch.Tensor], tuple[Any, ...]]:
    """Share an npu tensor through torch_npu's OWN reductions, whatever torch_npu_ipc registered.

    The data channel of the event tests: shared once, before any timed work,
    so that every later ordering comes from the events under test alone.
    torch_npu 2.6.0 and older have no tensor IPC of their own: there the
    plugin's sharing is the channel.
    """
    native = _native_reductions()
    if native is None:
        from torch_npu_ipc import sharing

        return sharing.reduce_npu_tensor(t)
    return native._npu_reduce_tensor(t)


def open_native(shared: tuple[Callable[..., torch.Tensor], tuple[Any, ...]]) -> torch.Tensor:
    """Rebuild a tensor sent by :func:`share_native`."""
    fn, args = shared
    return fn(*args)
