"""Bad input to the simulated runtime returns ACL error codes: never a crash, never a hang.

Every case runs in a spawned, torch-free child: a segfault would show up as
a non-zero exit code (run_processes fails on it) and a hang as a timeout.
The child reports ``{case: return code}`` and the parent asserts that every
code is non-zero, then that the runtime still works afterwards.
"""

from __future__ import annotations

import ctypes
import os
import random
from typing import Any

import pytest
from simacl import (
    ACL_EVENT_IPC,
    ACL_EVENT_SYNC,
    D2D,
    D2H,
    IPC_KEY_LEN,
    Acl,
    IpcEventHandle,
    requires_aclsim,
    run,
    spawn_context,
)

pytestmark = requires_aclsim

FORGED = [0xDEADBEEF, 1, 0x7FFF_FFFF_FFFF_FFF0, 0x5A00_0000_0000 + 16 * 99_999, 0x5E00_0000_0000 + 16 * 99_999]


def still_works(acl: Acl) -> bool:
    """After the bad calls, ordinary calls still succeed."""
    s = acl.create_stream()
    e = acl.create_event(ACL_EVENT_SYNC)
    acl.sleep(s, 0.01)
    acl.record(e, s)
    acl.check(acl.aclrtSynchronizeEvent(e), "aclrtSynchronizeEvent")
    p = acl.malloc(4096)
    acl.h2d(p, b"ok")
    return acl.d2h(p, 2) == b"ok"


def streams_worker(results: Any) -> None:
    """Destroyed and forged stream handles; calls before aclrtSetDevice; bad device ids."""
    acl = Acl()
    codes: dict[str, int] = {}
    s = ctypes.c_void_p()
    codes["create-stream-before-set-device"] = acl.aclrtCreateStream(ctypes.byref(s))
    codes["set-device-4"] = acl.aclrtSetDevice(4)
    codes["set-device--1"] = acl.aclrtSetDevice(-1)
    codes["set-device-1000"] = acl.aclrtSetDevice(1000)
    acl.set_device(0)
    ev = acl.create_event(ACL_EVENT_SYNC)
    dead = acl.create_stream()
    acl.check(acl.aclrtDestroyStream(dead), "aclrtDestroyStream")
    st = ctypes.c_int()
    buf = ctypes.create_string_buffer(16)
    dev = acl.malloc(4096)
    for name, h in [("destroyed", dead)] + [(f"forged-{x:#x}", x) for x in FORGED]:
        codes[f"{name}:sync"] = acl.aclrtSynchronizeStream(h)
        codes[f"{name}:sync-timeout"] = acl.aclrtSynchronizeStreamWithTimeout(h, 100)
        codes[f"{name}:query"] = acl.aclrtStreamQuery(h, ctypes.byref(st))
        codes[f"{name}:record"] = acl.aclrtRecordEvent(ev, h)
        codes[f"{name}:wait"] = acl.aclrtStreamWaitEvent(h, ev)
        codes[f"{name}:memcpy-async"] = acl.aclrtMemcpyAsync(buf, 16, dev, 16, D2H, h)
        codes[f"{name}:sleep"] = acl.aclsimStreamSleep(h, 1000)
        codes[f"{name}:destroy"] = acl.aclrtDestroyStream(h)
    codes["null-output:create-stream"] = acl.aclrtCreateStream(None)
    codes["null-output:stream-query"] = acl.aclrtStreamQuery(acl.create_stream(), None)
    results.put((codes, still_works(acl)))


def events_worker(results: Any) -> None:
    """Destroyed and forged event handles, bad flags, null outputs."""
    acl = Acl()
    acl.set_device(0)
    s = acl.create_stream()
    codes: dict[str, int] = {}
    dead = acl.create_event(ACL_EVENT_SYNC)
    acl.check(acl.aclrtDestroyEvent(dead), "aclrtDestroyEvent")
    good = acl.create_event(ACL_EVENT_SYNC)
    st = ctypes.c_int()
    ms = ctypes.c_float()
    h = IpcEventHandle()
    for name, e in [("destroyed", dead)] + [(f"forged-{x:#x}", x) for x in FORGED]:
        codes[f"{name}:record"] = acl.aclrtRecordEvent(e, s)
        codes[f"{name}:wait"] = acl.aclrtStreamWaitEvent(s, e)
        codes[f"{name}:query-status"] = acl.aclrtQueryEventStatus(e, ctypes.byref(st))
        codes[f"{name}:synchronize"] = acl.aclrtSynchronizeEvent(e)
        codes[f"{name}:elapsed"] = acl.aclrtEventElapsedTime(ctypes.byref(ms), good, e)
        codes[f"{name}:ipc-handle"] = acl.aclrtIpcGetEventHandle(e, ctypes.byref(h))
        codes[f"{name}:destroy"] = acl.aclrtDestroyEvent(e)
    e = ctypes.c_void_p()
    codes["flags-0x80"] = acl.aclrtCreateEventExWithFlag(ctypes.byref(e), 0x80)
    codes["flags-0xffffffff"] = acl.aclrtCreateEventExWithFlag(ctypes.byref(e), 0xFFFFFFFF)
    codes["flags-ipc|sync"] = acl.aclrtCreateEventExWithFlag(ctypes.byref(e), ACL_EVENT_IPC | ACL_EVENT_SYNC)
    codes["null-output:create"] = acl.aclrtCreateEventExWithFlag(None, ACL_EVENT_SYNC)
    codes["null-output:query"] = acl.aclrtQueryEventStatus(good, None)
    codes["null-output:ipc-handle"] = acl.aclrtIpcGetEventHandle(acl.create_event(ACL_EVENT_IPC), None)
    codes["elapsed-unrecorded"] = acl.aclrtEventElapsedTime(ctypes.byref(ms), good, good)
    results.put((codes, still_works(acl)))


def ipc_handles_worker(results: Any) -> None:
    """Forged, random, truncated and stale IPC event handles and memory keys."""
    rng = random.Random(1)
    acl = Acl()
    acl.set_device(0)
    codes: dict[str, int] = {}
    ev = acl.create_event(ACL_EVENT_IPC)
    real = acl.ipc_handle(ev)
    text = real.rstrip(b"\0").decode()
    prefix, kind, pid, ident, nonce = text.split(":")
    assert (prefix, kind, int(pid)) == ("aclsim", "e", os.getpid())
    p = acl.malloc(1 << 20)
    key = acl.export_key(p, 1 << 20, 0x1)
    key_text = key.rstrip(b"\0").decode()

    def h64(b: bytes) -> bytes:
        return b[:64].ljust(64, b"\0")

    wrong_nonce = f"{prefix}:{kind}:{pid}:{ident}:{int(nonce, 16) ^ 1:016x}".encode()
    handles = {
        "random": bytes(rng.randrange(1, 256) for _ in range(64)),
        "random-with-nul": bytes(rng.randrange(0, 256) for _ in range(63)) + b"\0",
        "zeros": bytes(64),
        "no-terminator": b"A" * 64,
        "truncated": h64(real[:20]),
        "truncated-nonce": h64(real[: len(text) - 3]),
        "wrong-nonce": h64(wrong_nonce),
        "wrong-id": h64(f"{prefix}:{kind}:{pid}:{int(ident) + 1000}:{nonce}".encode()),
        "pid-1": h64(f"{prefix}:{kind}:1:{ident}:{nonce}".encode()),
        "pid-0": h64(f"{prefix}:{kind}:0:{ident}:{nonce}".encode()),
        "negative-pid": h64(f"{prefix}:{kind}:-5:{ident}:{nonce}".encode()),
        "leading-zero": h64(f"{prefix}:{kind}:0{pid}:{ident}:{nonce}".encode()),
        "memory-key-as-event": h64(key),
    }
    for name, h in handles.items():
        codes[f"event-handle:{name}"] = acl.open_ipc_handle_rc(h)[0]
    keys = {
        "random": bytes(rng.randrange(1, 256) for _ in range(IPC_KEY_LEN - 1)) + b"\0",
        "no-terminator": b"K" * IPC_KEY_LEN,
        "empty": bytes(IPC_KEY_LEN),
        "truncated": key[:25].ljust(IPC_KEY_LEN, b"\0"),
        "wrong-nonce": key_text[:-1].encode() + (b"0" if key_text[-1] != "0" else b"1"),
        "event-handle-as-key": real[:IPC_KEY_LEN].ljust(IPC_KEY_LEN, b"\0"),
        "pid-1": key_text.replace(f":{os.getpid()}:", ":1:", 1).encode(),
    }
    for name, raw in keys.items():
        k = raw.ljust(IPC_KEY_LEN, b"\0")[:IPC_KEY_LEN]
        codes[f"mem-key:{name}:import"] = acl.import_key_rc(k, 0)[0]
        codes[f"mem-key:{name}:close"] = acl.aclrtIpcMemClose(k)
        one = (ctypes.c_int32 * 1)(os.getpid())
        codes[f"mem-key:{name}:set-pid"] = acl.aclrtIpcMemSetImportPid(k, one, 1)
    codes["mem-key:null-import"] = acl.aclrtIpcMemImportByKey(None, key, 0)
    codes["mem-key:null-key"] = acl.aclrtIpcMemImportByKey(ctypes.byref(ctypes.c_void_p()), None, 0)
    # The genuine handle and key still work after all that.
    results.put((codes, acl.open_ipc_handle_rc(real)[0] == 0 and acl.import_key_rc(key, 0)[0] == 0))


def pointers_worker(results: Any) -> None:
    """Foreign, freed, interior and out-of-range device pointers."""
    acl = Acl()
    acl.set_device(0)
    codes: dict[str, int] = {}
    p = acl.malloc(8192)
    q = acl.malloc(8192)
    freed = acl.malloc(8192)
    acl.check(acl.aclrtFree(freed), "aclrtFree")
    host = ctypes.create_string_buffer(8192)
    for name, ptr in [("freed", freed)] + [(f"forged-{x:#x}", x) for x in FORGED if x > 1]:
        codes[f"{name}:free"] = acl.aclrtFree(ptr)
        codes[f"{name}:d2h"] = acl.aclrtMemcpy(host, 16, ptr, 16, D2H)
        codes[f"{name}:d2d-src"] = acl.aclrtMemcpy(p, 16, ptr, 16, D2D)
        codes[f"{name}:d2d-dst"] = acl.aclrtMemcpy(ptr, 16, p, 16, D2D)
        codes[f"{name}:export"] = acl.export_key_rc(ptr, 4096, 0)[0]
    codes["free-null"] = acl.aclrtFree(None)
    codes["free-interior"] = acl.aclrtFree(p + 4096)
    codes["free-host-as-device"] = acl.aclrtFree(ctypes.addressof(host))
    codes["d2h-past-end"] = acl.aclrtMemcpy(host, 8192, p + 4096, 8192, D2H)
    codes["count-over-destmax"] = acl.aclrtMemcpy(q, 16, p, 32, D2D)
    codes["host-ptr-as-device"] = acl.aclrtMemcpy(host, 16, ctypes.addressof(host), 16, D2H)
    codes["device-ptr-as-host"] = acl.aclrtMemcpy(p, 16, q, 16, D2H)
    codes["bad-kind"] = acl.aclrtMemcpy(p, 16, q, 16, 42)
    codes["malloc-0"] = acl.aclrtMalloc(ctypes.byref(ctypes.c_void_p()), 0, 0)
    codes["malloc-huge"] = acl.aclrtMalloc(ctypes.byref(ctypes.c_void_p()), 1 << 50, 0)
    codes["malloc-null-out"] = acl.aclrtMalloc(None, 4096, 0)
    codes["cross-device-without-peer"] = 0
    acl.set_device(1)
    r = acl.malloc(4096)
    codes["cross-device-without-peer"] = acl.aclrtMemcpy(r, 16, p, 16, D2D)
    acl.set_device(0)
    results.put((codes, still_works(acl)))


@pytest.mark.parametrize(
    "worker",
    [streams_worker, events_worker, ipc_handles_worker, pytest.param(pointers_worker, marks=pytest.mark.devices(2))],
    ids=lambda f: f.__name__,
)
def test_bad_input_returns_error_codes(worker: Any) -> None:
    """Every bad call returns a non-zero ACL code, the child exits cleanly and the runtime still works."""
    results = spawn_context().Queue()
    run([(worker, (results,))], timeout=60)
    codes, healthy = results.get(timeout=5)
    assert len(codes) >= 10
    accepted = sorted(k for k, v in codes.items() if v == 0)
    assert not accepted, f"bad input accepted: {accepted}"
    assert healthy
