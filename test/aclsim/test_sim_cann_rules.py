"""Argument rules and error codes as CANN's runtime has them, through raw ACL in a torch-free child.

Each rule here was read in CANN's open-source runtime (GitHub hicann/runtime:
``ApiErrorDecorator`` in src/runtime, the ACL ``*Impl`` functions in
src/acl). A simulator that accepts what CANN refuses lets a caller's bug
pass on CPU and fail on hardware, so the accepted cases are checked as
closely as the refused ones.
"""

from __future__ import annotations

import ctypes
from typing import Any

from simacl import (
    ACL_EVENT_IPC,
    ACL_EVENT_SYNC,
    ACL_EVENT_TIME_LINE,
    Acl,
    IpcEventHandle,
    now,
    requires_aclsim,
    run,
    spawn_context,
)

pytestmark = requires_aclsim

ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_FEATURE_UNSUPPORTED = 200006
ACL_ERROR_RT_PARAM_INVALID = 107000
ACL_ERROR_RT_CONTEXT_NULL = 107002
ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000

ACL_EVENT_CAPTURE_STREAM_PROGRESS = 0x2
DDSYNC = 0x4  # CANN's RT_EVENT_DDSYNC: no ACL name, part of torch_npu's ACL_EVENT_DEFAULT
ACL_EVENT_DEFAULT = 0xE  # torch_npu's, for runtimes without aclrtCreateEventExWithFlag
ACL_EVENT_DEVICE_USE_ONLY = 0x10
ACL_EVENT_EXTERNAL = 0x20

# flags -> accepted? for aclrtCreateEventWithFlag (classic) and aclrtCreateEventExWithFlag (ex).
CLASSIC = {
    ACL_EVENT_SYNC: True,
    ACL_EVENT_TIME_LINE: True,
    ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE: True,
    ACL_EVENT_DEFAULT: True,
    ACL_EVENT_CAPTURE_STREAM_PROGRESS: True,
    ACL_EVENT_DEVICE_USE_ONLY: True,
    ACL_EVENT_EXTERNAL: True,
    0: False,
    ACL_EVENT_IPC: False,  # IPC events come from the Ex call only
    ACL_EVENT_EXTERNAL | ACL_EVENT_SYNC: False,
    ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_TIME_LINE: False,
    ACL_EVENT_EXTERNAL | ACL_EVENT_DEVICE_USE_ONLY: False,
    0x80: False,
}
EX = {
    ACL_EVENT_SYNC: True,
    ACL_EVENT_TIME_LINE: True,
    ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE: True,
    ACL_EVENT_DEFAULT: True,
    ACL_EVENT_IPC: True,
    0: False,
    ACL_EVENT_DEVICE_USE_ONLY: False,
    ACL_EVENT_EXTERNAL: False,
    ACL_EVENT_IPC | ACL_EVENT_SYNC: False,
    ACL_EVENT_IPC | ACL_EVENT_TIME_LINE: False,
    0x80: False,
    0x100: False,
}


def creation_worker(results: Any) -> None:
    """Creates events with every flag set of CLASSIC and EX; reports each call's code."""
    acl = Acl()
    acl.set_device(0)
    codes: dict[str, dict[int, int]] = {"classic": {}, "ex": {}}
    for kind, table, create in (
        ("classic", CLASSIC, acl.aclrtCreateEventWithFlag),
        ("ex", EX, acl.aclrtCreateEventExWithFlag),
    ):
        for flags in table:
            ev = ctypes.c_void_p()
            codes[kind][flags] = create(ctypes.byref(ev), flags)
            if codes[kind][flags] == 0:
                acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
    results.put(codes)


def test_event_creation_flags() -> None:
    """Each creation call takes the flag sets CANN takes, and refuses the others with 107000."""
    results = spawn_context().Queue()
    run([(creation_worker, (results,))])
    codes = results.get(timeout=5)
    for kind, table in (("classic", CLASSIC), ("ex", EX)):
        for flags, accepted in table.items():
            want = 0 if accepted else ACL_ERROR_RT_PARAM_INVALID
            assert codes[kind][flags] == want, f"{kind} flags {flags:#x}: got {codes[kind][flags]}, want {want}"


def event_kinds_worker(results: Any) -> None:
    """The calls CANN refuses on external, device-only and timing-only events, and a DDSYNC wait."""
    acl = Acl()
    acl.set_device(0)
    s = acl.create_stream()
    st = ctypes.c_int()
    codes: dict[str, int] = {}

    default = acl.create_event(ACL_EVENT_DEFAULT)  # its DDSYNC bit gives it a wait task
    acl.sleep(s, 0.01)
    acl.record(default, s)
    codes["wait on ACL_EVENT_DEFAULT"] = acl.aclrtStreamWaitEvent(s, default)

    external = acl.create_classic_event(ACL_EVENT_EXTERNAL)
    codes["external: record"] = acl.aclrtRecordEvent(external, s)
    codes["external: aclrtSynchronizeEvent"] = acl.aclrtSynchronizeEvent(external)
    codes["external: aclrtQueryEventStatus"] = acl.aclrtQueryEventStatus(external, ctypes.byref(st))
    codes["external: aclrtQueryEvent"] = acl.aclrtQueryEvent(external, ctypes.byref(st))
    codes["external: aclrtEventGetTimestamp"] = acl.aclrtEventGetTimestamp(external, ctypes.byref(ctypes.c_uint64()))

    device_only = acl.create_classic_event(ACL_EVENT_DEVICE_USE_ONLY)
    codes["device-only: record"] = acl.aclrtRecordEvent(device_only, s)
    codes["device-only: wait"] = acl.aclrtStreamWaitEvent(s, device_only)
    codes["device-only: reset"] = acl.aclrtResetEvent(device_only, s)

    timing = acl.create_classic_event(ACL_EVENT_TIME_LINE)
    acl.record(timing, s)
    codes["time-line: reset"] = acl.aclrtResetEvent(timing, s)
    acl.sync_stream(s)
    results.put(codes)


def test_calls_refused_by_event_kind() -> None:
    """External events are neither synchronized nor queried; device-only ones are not used by streams."""
    results = spawn_context().Queue()
    run([(event_kinds_worker, (results,))])
    codes = results.get(timeout=5)
    assert codes == {
        "wait on ACL_EVENT_DEFAULT": 0,
        "external: record": 0,
        "external: aclrtSynchronizeEvent": ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "external: aclrtQueryEventStatus": ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "external: aclrtQueryEvent": ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "external: aclrtEventGetTimestamp": ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "device-only: record": ACL_ERROR_RT_PARAM_INVALID,
        "device-only: wait": ACL_ERROR_RT_PARAM_INVALID,
        "device-only: reset": ACL_ERROR_RT_PARAM_INVALID,
        "time-line: reset": ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    }


def codes_worker(results: Any) -> None:
    """Synchronize timeouts, peer access to oneself, a handle of a local event, a null stream."""
    acl = Acl()
    acl.set_device(0)
    s = acl.create_stream()
    ev = acl.create_event(ACL_EVENT_SYNC)
    acl.record(ev, s)
    can = ctypes.c_int32(-1)
    codes = {
        "event timeout 0": acl.aclrtSynchronizeEventWithTimeout(ev, 0),
        "event timeout -2": acl.aclrtSynchronizeEventWithTimeout(ev, -2),
        "event timeout -1": acl.aclrtSynchronizeEventWithTimeout(ev, -1),
        "event timeout 1000": acl.aclrtSynchronizeEventWithTimeout(ev, 1000),
        "stream timeout 0": acl.aclrtSynchronizeStreamWithTimeout(s, 0),
        "stream timeout -2": acl.aclrtSynchronizeStreamWithTimeout(s, -2),
        "stream timeout -1": acl.aclrtSynchronizeStreamWithTimeout(s, -1),
        "stream timeout 1000": acl.aclrtSynchronizeStreamWithTimeout(s, 1000),
        "device timeout -2": acl.aclrtSynchronizeDeviceWithTimeout(-2),
        "device timeout -1": acl.aclrtSynchronizeDeviceWithTimeout(-1),
        "can access peer 0 -> 0": acl.aclrtDeviceCanAccessPeer(ctypes.byref(can), 0, 0),
        "can access peer 0 -> 1": acl.aclrtDeviceCanAccessPeer(ctypes.byref(can), 0, 1),
        "enable peer 0 on 0": acl.aclrtDeviceEnablePeerAccess(0, 0),
        "enable peer 1 with flags 1": acl.aclrtDeviceEnablePeerAccess(1, 1),
        "enable peer 1": acl.aclrtDeviceEnablePeerAccess(1, 0),
        "handle of a local event": acl.aclrtIpcGetEventHandle(ev, ctypes.byref(IpcEventHandle())),
        "destroy a null stream": acl.aclrtDestroyStream(None),
    }
    results.put((codes, can.value))


def test_error_codes() -> None:
    """The codes CANN returns for bad timeouts, peer access to oneself, a local event's handle, a null stream."""
    results = spawn_context().Queue()
    run([(codes_worker, (results,))])
    codes, can = results.get(timeout=5)
    assert codes == {
        "event timeout 0": ACL_ERROR_RT_PARAM_INVALID,
        "event timeout -2": ACL_ERROR_RT_PARAM_INVALID,
        "event timeout -1": 0,
        "event timeout 1000": 0,
        "stream timeout 0": ACL_ERROR_RT_PARAM_INVALID,
        "stream timeout -2": ACL_ERROR_RT_PARAM_INVALID,
        "stream timeout -1": 0,
        "stream timeout 1000": 0,
        "device timeout -2": ACL_ERROR_RT_PARAM_INVALID,
        "device timeout -1": 0,
        "can access peer 0 -> 0": ACL_ERROR_INVALID_PARAM,
        "can access peer 0 -> 1": 0,
        "enable peer 0 on 0": ACL_ERROR_INVALID_PARAM,
        "enable peer 1 with flags 1": ACL_ERROR_FEATURE_UNSUPPORTED,
        "enable peer 1": 0,
        "handle of a local event": ACL_ERROR_RT_PARAM_INVALID,
        "destroy a null stream": ACL_ERROR_INVALID_PARAM,
    }
    assert can == 1


def destroy_worker(results: Any) -> None:
    """Destroys a stream that still has 0.3 s of work queued."""
    acl = Acl()
    acl.set_device(0)
    s = acl.create_stream()
    acl.sleep(s, 0.3)
    t = now()
    rc = acl.aclrtDestroyStream(s)
    results.put((rc, now() - t))


def test_destroying_a_stream_waits_for_its_work() -> None:
    """As CANN documents: aclrtDestroyStream returns once the stream's queued work has run."""
    results = spawn_context().Queue()
    run([(destroy_worker, (results,))])
    rc, took = results.get(timeout=5)
    assert rc == 0
    assert 0.25 <= took < 5, took


def recent_message_worker(results: Any) -> None:
    """aclGetRecentErrMsg around failing calls, read and unread."""
    acl = Acl()
    # A second handle of the library whose aclGetRecentErrMsg returns the raw pointer.
    raw_message = ctypes.CDLL("libascendcl.so").aclGetRecentErrMsg
    raw_message.restype = ctypes.c_void_p
    raw_message.argtypes = []
    out: dict[str, Any] = {}
    dev = ctypes.c_int32(-7)
    out["get device before set"] = (acl.aclrtGetDevice(ctypes.byref(dev)), acl.last_error())
    acl.aclrtSetDevice(1000)
    acl.aclrtSetDevice(1001)
    out["two unread"] = acl.last_error()
    out["read again"] = acl.last_error()
    acl.aclrtSetDevice(1002)
    handed_out = raw_message()
    acl.aclrtSetDevice(1003)  # fails too: the text handed out stays as it was
    out["handed out, after another failure"] = ctypes.string_at(handed_out).decode()
    out["the later one"] = acl.last_error()
    for device in range(2000, 2040):
        acl.aclrtSetDevice(device)
    out["forty unread"] = acl.last_error().splitlines()
    acl.set_device(0)
    out["get device after set"] = (acl.aclrtGetDevice(ctypes.byref(dev)), dev.value, acl.last_error())
    results.put(out)


def test_recent_error_message_is_read_once_and_stays_valid() -> None:
    """CANN's aclGetRecentErrMsg: returns and clears the unread messages, newest first.

    Its documentation (hicann/runtime, docs/api_docs/aclGetRecentErrMsg.md):
    unread messages pile up, and the pointer of the latest read stays valid
    until the next read. Before, aclsim kept only the latest message and a
    later failing call freed the text already handed out: torch_npu reads the
    message, then calls aclrtGetDevice, so ``torch.npu.set_device(5)`` as a
    first call raised UnicodeDecodeError on freed bytes. aclrtGetDevice with
    no device set only answers the code (CANN logs it at info level).
    """
    results = spawn_context().Queue()
    run([(recent_message_worker, (results,))])
    out = results.get(timeout=5)
    assert out["get device before set"] == (ACL_ERROR_RT_CONTEXT_NULL, "")
    first, second = out["two unread"].splitlines()
    assert "device 1001 does not exist" in first and "device 1000 does not exist" in second
    assert out["read again"] == ""
    assert "device 1002 does not exist" in out["handed out, after another failure"]
    assert "1003" not in out["handed out, after another failure"]
    assert "device 1003 does not exist" in out["the later one"]
    kept = out["forty unread"]
    assert len(kept) == 16 and "device 2039 " in kept[0] and "device 2024 " in kept[-1]
    assert out["get device after set"] == (0, 0, "")
