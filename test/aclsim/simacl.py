"""Raw ACL through ctypes, for the aclsim fidelity tests.

This module is torch-free on purpose: worker processes that only talk raw
ACL import it (and the test module holding the worker) without paying for
``import torch``. It binds the ACL calls the tests use with exact C
signatures (as declared in the acl_rt.h torch_npu 2.13 ships), so that a
wrong argument can never be mistaken for a simulator bug.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import aclsim

# These tests check the simulator itself: on a machine with real CANN (where
# test/conftest.py does not activate aclsim) they do not apply.
requires_aclsim = pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)")

ACL_SUCCESS = 0

# Event flags (acl_rt.h).
ACL_EVENT_SYNC = 0x1
ACL_EVENT_TIME_LINE = 0x8
ACL_EVENT_IPC = 0x40

# aclrtEventRecordedStatus / aclrtStreamStatus.
RECORDED_NOT_READY = 0
RECORDED_COMPLETE = 1
STREAM_COMPLETE = 0
STREAM_NOT_READY = 1

# Memcpy kinds.
H2H, H2D, D2H, D2D = 0, 1, 2, 3

IPC_KEY_LEN = 65
IPC_EXPORT_DISABLE_PID_VALIDATION = 0x1
IPC_IMPORT_ENABLE_PEER_ACCESS = 0x1

ACL_MEM_MALLOC_HUGE_FIRST = 0


class IpcEventHandle(ctypes.Structure):
    """``aclrtIpcEventHandle``: ``struct { char reserved[64]; }``, passed by value."""

    _fields_ = [("reserved", ctypes.c_char * 64)]


class AclError(RuntimeError):
    """An ACL call returned a non-zero code."""

    def __init__(self, call: str, code: int, message: str) -> None:
        super().__init__(f"{call} failed with {code}: {message}")
        self.code = code


_VP = ctypes.c_void_p
_PVP = ctypes.POINTER(ctypes.c_void_p)

# name -> (restype, argtypes)
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "aclrtSetDevice": (ctypes.c_int, [ctypes.c_int32]),
    "aclrtResetDevice": (ctypes.c_int, [ctypes.c_int32]),
    "aclrtGetDevice": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int32)]),
    "aclrtGetDeviceCount": (ctypes.c_int, [ctypes.POINTER(ctypes.c_uint32)]),
    "aclrtDeviceGetBareTgid": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int32)]),
    "aclrtGetSocName": (ctypes.c_char_p, []),
    "aclGetRecentErrMsg": (ctypes.c_char_p, []),
    "aclrtCreateStream": (ctypes.c_int, [_PVP]),
    "aclrtDestroyStream": (ctypes.c_int, [_VP]),
    "aclrtSynchronizeStream": (ctypes.c_int, [_VP]),
    "aclrtSynchronizeStreamWithTimeout": (ctypes.c_int, [_VP, ctypes.c_int32]),
    "aclrtStreamQuery": (ctypes.c_int, [_VP, ctypes.POINTER(ctypes.c_int)]),
    "aclrtCreateEventExWithFlag": (ctypes.c_int, [_PVP, ctypes.c_uint32]),
    "aclrtCreateEventWithFlag": (ctypes.c_int, [_PVP, ctypes.c_uint32]),
    "aclrtDestroyEvent": (ctypes.c_int, [_VP]),
    "aclrtRecordEvent": (ctypes.c_int, [_VP, _VP]),
    "aclrtResetEvent": (ctypes.c_int, [_VP, _VP]),
    "aclrtStreamWaitEvent": (ctypes.c_int, [_VP, _VP]),
    "aclrtSynchronizeEvent": (ctypes.c_int, [_VP]),
    "aclrtSynchronizeEventWithTimeout": (ctypes.c_int, [_VP, ctypes.c_int32]),
    "aclrtQueryEventStatus": (ctypes.c_int, [_VP, ctypes.POINTER(ctypes.c_int)]),
    "aclrtQueryEvent": (ctypes.c_int, [_VP, ctypes.POINTER(ctypes.c_int)]),
    "aclrtQueryEventWaitStatus": (ctypes.c_int, [_VP, ctypes.POINTER(ctypes.c_int)]),
    "aclrtEventElapsedTime": (ctypes.c_int, [ctypes.POINTER(ctypes.c_float), _VP, _VP]),
    "aclrtEventGetTimestamp": (ctypes.c_int, [_VP, ctypes.POINTER(ctypes.c_uint64)]),
    "aclrtGetEventId": (ctypes.c_int, [_VP, ctypes.POINTER(ctypes.c_uint32)]),
    "aclrtIpcGetEventHandle": (ctypes.c_int, [_VP, ctypes.POINTER(IpcEventHandle)]),
    "aclrtIpcOpenEventHandle": (ctypes.c_int, [IpcEventHandle, _PVP]),
    "aclrtMalloc": (ctypes.c_int, [_PVP, ctypes.c_size_t, ctypes.c_int]),
    "aclrtFree": (ctypes.c_int, [_VP]),
    "aclrtMallocHost": (ctypes.c_int, [_PVP, ctypes.c_size_t]),
    "aclrtFreeHost": (ctypes.c_int, [_VP]),
    "aclrtMemcpy": (ctypes.c_int, [_VP, ctypes.c_size_t, _VP, ctypes.c_size_t, ctypes.c_int]),
    "aclrtMemcpyAsync": (ctypes.c_int, [_VP, ctypes.c_size_t, _VP, ctypes.c_size_t, ctypes.c_int, _VP]),
    "aclrtIpcMemGetExportKey": (
        ctypes.c_int,
        [_VP, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64],
    ),
    "aclrtIpcMemSetImportPid": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t]),
    "aclrtIpcMemImportByKey": (ctypes.c_int, [_PVP, ctypes.c_char_p, ctypes.c_uint64]),
    "aclrtIpcMemClose": (ctypes.c_int, [ctypes.c_char_p]),
    "aclrtSynchronizeDeviceWithTimeout": (ctypes.c_int, [ctypes.c_int32]),
    "aclrtDeviceCanAccessPeer": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_int32]),
    "aclrtDeviceEnablePeerAccess": (ctypes.c_int, [ctypes.c_int32, ctypes.c_uint32]),
    "aclsimStreamSleep": (ctypes.c_int, [_VP, ctypes.c_uint64]),
}


def load() -> ctypes.CDLL:
    """Activate aclsim in this (torch-free) process and return libascendcl.so with typed functions."""
    aclsim.activate()
    lib = ctypes.CDLL("libascendcl.so")
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


class Acl:
    """Thin checked wrappers over the raw ACL functions (one per process)."""

    def __init__(self) -> None:
        self.lib = load()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lib, name)

    def check(self, rc: int, call: str) -> None:
        """Raise AclError when rc is non-zero."""
        if rc != ACL_SUCCESS:
            raise AclError(call, rc, self.last_error())

    def last_error(self) -> str:
        msg = self.lib.aclGetRecentErrMsg()
        return msg.decode(errors="replace") if msg else ""

    # -- devices, streams -------------------------------------------------
    def set_device(self, dev: int) -> None:
        self.check(self.lib.aclrtSetDevice(dev), "aclrtSetDevice")

    def create_stream(self) -> int:
        s = ctypes.c_void_p()
        self.check(self.lib.aclrtCreateStream(ctypes.byref(s)), "aclrtCreateStream")
        assert s.value
        return s.value

    def sync_stream(self, stream: int) -> None:
        self.check(self.lib.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")

    def stream_busy(self, stream: int) -> bool:
        st = ctypes.c_int(-1)
        self.check(self.lib.aclrtStreamQuery(stream, ctypes.byref(st)), "aclrtStreamQuery")
        return st.value == STREAM_NOT_READY

    def sleep(self, stream: int, seconds: float) -> None:
        self.check(self.lib.aclsimStreamSleep(stream, int(seconds * 1e9)), "aclsimStreamSleep")

    # -- events --------------------------------------------------------------
    def create_event(self, flags: int) -> int:
        e = ctypes.c_void_p()
        self.check(self.lib.aclrtCreateEventExWithFlag(ctypes.byref(e), flags), "aclrtCreateEventExWithFlag")
        assert e.value
        return e.value

    def create_classic_event(self, flags: int) -> int:
        """An event made by aclrtCreateEventWithFlag (CANN tracks its wait tasks; reset and query allowed)."""
        e = ctypes.c_void_p()
        self.check(self.lib.aclrtCreateEventWithFlag(ctypes.byref(e), flags), "aclrtCreateEventWithFlag")
        assert e.value
        return e.value

    def record(self, event: int, stream: int) -> None:
        self.check(self.lib.aclrtRecordEvent(event, stream), "aclrtRecordEvent")

    def wait(self, stream: int, event: int) -> None:
        self.check(self.lib.aclrtStreamWaitEvent(stream, event), "aclrtStreamWaitEvent")

    def query_status(self, event: int) -> int:
        st = ctypes.c_int(-1)
        self.check(self.lib.aclrtQueryEventStatus(event, ctypes.byref(st)), "aclrtQueryEventStatus")
        return st.value

    def ipc_handle(self, event: int) -> bytes:
        h = IpcEventHandle()
        self.check(self.lib.aclrtIpcGetEventHandle(event, ctypes.byref(h)), "aclrtIpcGetEventHandle")
        return bytes(bytearray(h))

    def open_ipc_handle_rc(self, handle: bytes) -> tuple[int, int]:
        """Return (rc, event) of aclrtIpcOpenEventHandle for the 64 raw handle bytes."""
        h = IpcEventHandle.from_buffer_copy(handle)
        e = ctypes.c_void_p()
        rc = self.lib.aclrtIpcOpenEventHandle(h, ctypes.byref(e))
        return rc, e.value or 0

    def open_ipc_handle(self, handle: bytes) -> int:
        rc, e = self.open_ipc_handle_rc(handle)
        self.check(rc, "aclrtIpcOpenEventHandle")
        assert e
        return e

    # -- memory ---------------------------------------------------------------
    def malloc(self, size: int) -> int:
        p = ctypes.c_void_p()
        self.check(self.lib.aclrtMalloc(ctypes.byref(p), size, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc")
        assert p.value
        return p.value

    def h2d(self, dst: int, data: bytes) -> None:
        buf = ctypes.create_string_buffer(data, len(data))
        self.check(self.lib.aclrtMemcpy(dst, len(data), buf, len(data), H2D), "aclrtMemcpy(H2D)")

    def d2h(self, src: int, n: int) -> bytes:
        buf = ctypes.create_string_buffer(n)
        self.check(self.lib.aclrtMemcpy(buf, n, src, n, D2H), "aclrtMemcpy(D2H)")
        return buf.raw

    def export_key_rc(self, ptr: int, size: int, flags: int) -> tuple[int, bytes]:
        key = ctypes.create_string_buffer(IPC_KEY_LEN)
        rc = self.lib.aclrtIpcMemGetExportKey(ptr, size, key, IPC_KEY_LEN, flags)
        return rc, key.raw

    def export_key(self, ptr: int, size: int, flags: int) -> bytes:
        rc, key = self.export_key_rc(ptr, size, flags)
        self.check(rc, "aclrtIpcMemGetExportKey")
        return key

    def import_key_rc(self, key: bytes, flags: int) -> tuple[int, int]:
        p = ctypes.c_void_p()
        rc = self.lib.aclrtIpcMemImportByKey(ctypes.byref(p), key, flags)
        return rc, p.value or 0

    def set_import_pids(self, key: bytes, pids: Sequence[int]) -> None:
        arr = (ctypes.c_int32 * len(pids))(*pids)
        self.check(self.lib.aclrtIpcMemSetImportPid(key, arr, len(pids)), "aclrtIpcMemSetImportPid")


def counters_delta(before: dict[str, int]) -> dict[str, int]:
    """Return the counters that changed since ``before`` (a previous aclsim.counters())."""
    now = aclsim.counters()
    return {k: v - before.get(k, 0) for k, v in now.items() if v != before.get(k, 0)}


def now() -> float:
    """CLOCK_MONOTONIC seconds: comparable across processes on one machine."""
    return time.monotonic()


def run(targets: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]], timeout: float = 30.0) -> None:
    """Run spawned workers with test/helpers.py's run_processes (imported lazily: it imports torch)."""
    from helpers import run_processes

    run_processes(targets, timeout=timeout)


def spawn_context() -> Any:
    """The multiprocessing spawn context (the one torch.multiprocessing uses)."""
    import multiprocessing

    return multiprocessing.get_context("spawn")


def shm_entries() -> set[str]:
    """Names in /dev/shm (POSIX shared memory and semaphores)."""
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


# /dev/shm names other programs on this shared machine create while a test
# runs: Python multiprocessing semaphores and torch's CPU tensor sharing.
FOREIGN_SHM = ("sem.mp-", "torch_", "psm_")


def new_shm_entries(before: set[str]) -> set[str]:
    """Entries added to /dev/shm since ``before`` and still there, except other programs' known ones."""
    first = shm_entries() - before
    time.sleep(0.1)
    persistent = first & shm_entries()
    return {n for n in persistent if "aclsim" in n or not n.startswith(FOREIGN_SHM)}
