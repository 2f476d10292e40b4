"""Per-process call counters of the simulated runtime."""

from __future__ import annotations

import ctypes

from aclsim._env import runtime


def counters() -> dict[str, int]:
    """Return this process's runtime call counts, by name.

    Names include ``aclrtSynchronizeStream``, ``aclrtSynchronizeEvent``,
    ``aclrtStreamWaitEvent``, ``aclrtRecordEvent``, ``memcpy_*`` by kind,
    ``ipc_event_create/open/destroy`` and ``ipc_mem_export/import/close``.
    """
    rt = runtime()
    rt.aclsimCounterName.restype = ctypes.c_char_p
    rt.aclsimCounterName.argtypes = [ctypes.c_int]
    rt.aclsimCounterValue.restype = ctypes.c_uint64
    rt.aclsimCounterValue.argtypes = [ctypes.c_int]
    n = rt.aclsimCounterCount()
    return {rt.aclsimCounterName(i).decode(): int(rt.aclsimCounterValue(i)) for i in range(n)}


def reset_counters() -> None:
    """Set every counter of this process back to zero."""
    runtime().aclsimResetCounters()
