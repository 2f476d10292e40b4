"""IPC events across real processes through raw ACL (ctypes).

A producer creates an event with ACL_EVENT_IPC, exports its 64-byte handle
(aclrtIpcGetEventHandle) and sends it through a Queue; the consumer opens it
(aclrtIpcOpenEventHandle, handle passed BY VALUE) and makes its stream wait.
Timing and query evidence show the consumer is released only after the
producer's work, and the same in the other direction.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Any

import pytest
from simacl import (
    ACL_EVENT_IPC,
    ACL_EVENT_SYNC,
    ACL_EVENT_TIME_LINE,
    RECORDED_COMPLETE,
    RECORDED_NOT_READY,
    Acl,
    IpcEventHandle,
    counters_delta,
    now,
    requires_aclsim,
    run,
    spawn_context,
)

import aclsim

pytestmark = [requires_aclsim, pytest.mark.mode_independent]

# aclsim's stream-sync timeout code (ACL_ERROR_RT_STREAM_SYNC_TIMEOUT): a
# dead recorder must be reported as such, not as a timeout.
ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046
WORK = 0.3  # seconds of simulated device work per step
SLACK = 0.01  # sleep_for never wakes early; allow for clock granularity


def handshake_producer(to_cons: Any, to_prod: Any, results: Any) -> None:
    """Device 0: records after WORK seconds, then waits for the consumer's record."""
    acl = Acl()
    acl.set_device(0)
    s = acl.create_stream()
    before = aclsim.counters()
    ev = acl.create_event(ACL_EVENT_IPC)
    handle = acl.ipc_handle(ev)
    assert len(handle) == 64
    to_cons.put(("handle", handle))
    assert to_prod.get(timeout=20) == "opened"

    acl.sleep(s, WORK)
    t_issue = now()
    acl.record(ev, s)
    to_cons.put(("recorded", t_issue))

    # Two-way: the consumer records the same event after its own work.
    kind, t_back = to_prod.get(timeout=20)
    assert kind == "back"
    acl.wait(s, ev)
    acl.sync_stream(s)
    t_rel = now()
    assert t_rel >= t_back + WORK - SLACK, (t_rel, t_back)
    assert acl.query_status(ev) == RECORDED_COMPLETE
    acl.check(acl.aclrtSynchronizeEvent(ev), "aclrtSynchronizeEvent")
    to_cons.put(("finished", None))
    assert to_prod.get(timeout=20) == "bye"
    acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
    results.put(("producer", counters_delta(before)))


def handshake_consumer(device: int, to_cons: Any, to_prod: Any, results: Any) -> None:
    """Opens the handle on `device`, waits for the producer, then signals back."""
    acl = Acl()
    acl.set_device(device)
    c = acl.create_stream()
    before = aclsim.counters()
    kind, handle = to_cons.get(timeout=20)
    assert kind == "handle"
    ev = acl.open_ipc_handle(handle)
    # Never recorded yet: COMPLETE, and a wait is a no-op.
    assert acl.query_status(ev) == RECORDED_COMPLETE
    to_prod.put("opened")

    kind, t_issue = to_cons.get(timeout=20)
    assert kind == "recorded"
    acl.wait(c, ev)
    t_wait = now()
    pending_at_wait = acl.query_status(ev) == RECORDED_NOT_READY
    acl.sync_stream(c)
    t_rel = now()
    assert t_wait < t_issue + WORK, "the wait was issued after the producer's work: the check would be vacuous"
    assert pending_at_wait
    assert t_rel >= t_issue + WORK - SLACK, f"consumer released {t_issue + WORK - t_rel:.3f} s before the record ran"
    assert acl.query_status(ev) == RECORDED_COMPLETE

    acl.sleep(c, WORK)
    t_back = now()
    acl.record(ev, c)
    to_prod.put(("back", t_back))
    assert to_cons.get(timeout=20) == ("finished", None)
    acl.sync_stream(c)
    acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
    results.put(("consumer", counters_delta(before)))
    to_prod.put("bye")


@pytest.mark.parametrize(
    "device", [0, pytest.param(1, marks=pytest.mark.devices(2))], ids=["same-device", "cross-device"]
)
def test_two_way_handshake(device: int) -> None:
    """Consumer waits for the producer's record; producer waits for the consumer's record."""
    ctx = spawn_context()
    to_cons, to_prod, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    run(
        [
            (handshake_producer, (to_cons, to_prod, results)),
            (handshake_consumer, (device, to_cons, to_prod, results)),
        ]
    )
    got = dict(results.get(timeout=5) for _ in range(2))
    prod, cons = got["producer"], got["consumer"]
    assert prod.get("ipc_event_create") == 1
    assert prod.get("ipc_event_get_handle") == 1
    assert prod.get("ipc_event_destroy") == 1
    assert prod.get("aclrtRecordEvent") == 1
    assert prod.get("aclrtStreamWaitEvent") == 1
    assert cons.get("ipc_event_open") == 1
    assert cons.get("aclrtStreamWaitEvent") == 1
    assert cons.get("aclrtRecordEvent") == 1
    assert "ipc_event_create" not in cons


def forbidden_calls_worker(results: Any) -> None:
    """Calls CANN forbids on IPC events, on the exported and on an opened event."""
    acl = Acl()
    acl.set_device(0)
    s = acl.create_stream()
    ev = acl.create_event(ACL_EVENT_IPC)
    opened = acl.open_ipc_handle(acl.ipc_handle(ev))
    other = acl.create_event(ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE)
    acl.record(other, s)
    acl.record(ev, s)
    acl.sync_stream(s)
    codes: dict[str, int] = {}
    st = ctypes.c_int()
    ms = ctypes.c_float()
    ts = ctypes.c_uint64()
    eid = ctypes.c_uint32()
    for name, e in (("exported", ev), ("opened", opened)):
        codes[f"{name}:aclrtResetEvent"] = acl.aclrtResetEvent(e, s)
        codes[f"{name}:aclrtQueryEvent"] = acl.aclrtQueryEvent(e, ctypes.byref(st))
        codes[f"{name}:aclrtQueryEventWaitStatus"] = acl.aclrtQueryEventWaitStatus(e, ctypes.byref(st))
        codes[f"{name}:aclrtEventElapsedTime"] = acl.aclrtEventElapsedTime(ctypes.byref(ms), other, e)
        codes[f"{name}:aclrtEventElapsedTime(rev)"] = acl.aclrtEventElapsedTime(ctypes.byref(ms), e, other)
        codes[f"{name}:aclrtEventGetTimestamp"] = acl.aclrtEventGetTimestamp(e, ctypes.byref(ts))
        codes[f"{name}:aclrtGetEventId"] = acl.aclrtGetEventId(e, ctypes.byref(eid))
    # Flag combinations with ACL_EVENT_IPC are rejected.
    for flags in (ACL_EVENT_IPC | ACL_EVENT_SYNC, ACL_EVENT_IPC | ACL_EVENT_TIME_LINE, ACL_EVENT_IPC | 0x20):
        e = ctypes.c_void_p()
        codes[f"create:{flags:#x}"] = acl.aclrtCreateEventExWithFlag(ctypes.byref(e), flags)
    # Only an ACL_EVENT_IPC event has a handle.
    codes["handle-of-local-event"] = acl.aclrtIpcGetEventHandle(other, ctypes.byref(IpcEventHandle()))
    # As CANN's runtime: no reset and no aclrtQueryEvent on ANY event aclrtCreateEventExWithFlag made.
    codes["ex-event:aclrtResetEvent"] = acl.aclrtResetEvent(other, s)
    codes["ex-event:aclrtQueryEvent"] = acl.aclrtQueryEvent(other, ctypes.byref(st))
    classic = acl.create_classic_event(ACL_EVENT_SYNC)
    acl.record(classic, s)
    acl.sync_stream(s)
    # The allowed calls still work on the IPC event.
    allowed = {
        "classic:aclrtQueryEvent": acl.aclrtQueryEvent(classic, ctypes.byref(st)),
        "classic:aclrtResetEvent": acl.aclrtResetEvent(classic, s),
        "aclrtQueryEventStatus": acl.aclrtQueryEventStatus(ev, ctypes.byref(st)),
        "aclrtSynchronizeEvent": acl.aclrtSynchronizeEvent(opened),
        "aclrtDestroyEvent(opened)": acl.aclrtDestroyEvent(opened),
        "aclrtDestroyEvent": acl.aclrtDestroyEvent(ev),
    }
    results.put((codes, allowed))


def test_forbidden_calls_and_flags() -> None:
    """ResetEvent/QueryEvent/QueryEventWaitStatus/ElapsedTime/GetTimestamp/GetEventId fail on IPC events.

    ResetEvent and QueryEvent also fail on every other aclrtCreateEventExWithFlag event, not on one
    aclrtCreateEventWithFlag made.
    """
    results = spawn_context().Queue()
    run([(forbidden_calls_worker, (results,))])
    codes, allowed = results.get(timeout=5)
    assert len(codes) == 7 * 2 + 3 + 1 + 2
    zero = [k for k, v in codes.items() if v == 0]
    assert not zero, f"calls that should fail returned 0: {zero}"
    assert all(v == 0 for v in allowed.values()), allowed


def exporter_then_exit(destroy: bool, out: Any) -> None:
    """Exports an IPC event handle, optionally destroys the event, and exits."""
    acl = Acl()
    acl.set_device(0)
    ev = acl.create_event(ACL_EVENT_IPC)
    handle = acl.ipc_handle(ev)
    if destroy:
        acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
    out.put(handle)


def destroyed_exporter(handles: Any, go: Any, verdict: Any) -> None:
    """Exports two events, destroys the first, and stays alive until the opener is done."""
    acl = Acl()
    acl.set_device(0)
    ev1 = acl.create_event(ACL_EVENT_IPC)
    ev2 = acl.create_event(ACL_EVENT_IPC)
    h1, h2 = acl.ipc_handle(ev1), acl.ipc_handle(ev2)
    acl.check(acl.aclrtDestroyEvent(ev1), "aclrtDestroyEvent")
    handles.put((h1, h2))
    assert go.get(timeout=20) == "done"
    verdict.put("exporter-ok")


def opener(handles: Any, go: Any, verdict: Any) -> None:
    """Opens a destroyed event's handle (must fail) and a live one (must work)."""
    acl = Acl()
    acl.set_device(0)
    h1, h2 = handles.get(timeout=20)
    rc1, _ = acl.open_ipc_handle_rc(h1)
    rc2, ev2 = acl.open_ipc_handle_rc(h2)
    go.put("done")
    verdict.put(("rc", rc1, rc2, bool(ev2)))


def test_open_after_destroy_or_exit_fails() -> None:
    """Opening a handle whose event was destroyed, or whose exporter exited, fails with an error."""
    ctx = spawn_context()
    handles, go, verdict = ctx.Queue(), ctx.Queue(), ctx.Queue()
    run([(destroyed_exporter, (handles, go, verdict)), (opener, (handles, go, verdict))])
    got = sorted((verdict.get(timeout=5) for _ in range(2)), key=str)
    rc_msg = next(v for v in got if v[0] == "rc")
    _, rc_destroyed, rc_live, opened = rc_msg
    assert rc_destroyed != 0
    assert rc_live == 0 and opened

    # Exporter gone altogether: its handle no longer opens.
    out = ctx.Queue()
    run([(exporter_then_exit, (False, out))])
    handle = out.get(timeout=5)
    results = ctx.Queue()
    run([(open_stale_worker, (handle, results))])
    rc, elapsed = results.get(timeout=5)
    assert rc != 0
    assert elapsed < 5.0


def open_stale_worker(handle: bytes, results: Any) -> None:
    """Tries to open a handle whose exporter already exited."""
    acl = Acl()
    acl.set_device(0)
    t = now()
    rc, _ = acl.open_ipc_handle_rc(handle)
    results.put((rc, now() - t))


def killed_producer(to_cons: Any, to_prod: Any) -> None:
    """Records an event behind long device work, then waits to be SIGKILLed."""
    acl = Acl()
    acl.set_device(0)
    s = acl.create_stream()
    ev = acl.create_event(ACL_EVENT_IPC)
    to_cons.put(acl.ipc_handle(ev))
    assert to_prod.get(timeout=20) == "opened"
    acl.sleep(s, 60.0)  # the record below never runs
    acl.record(ev, s)
    to_cons.put("recorded")
    time.sleep(60)


def orphaned_consumer(to_cons: Any, to_parent: Any) -> None:
    """Waits on the event; the parent kills the recorder meanwhile."""
    acl = Acl()
    acl.set_device(0)
    c = acl.create_stream()
    ev = acl.open_ipc_handle(to_cons.get(timeout=20))
    to_parent.put("opened")
    assert to_cons.get(timeout=20) == "recorded"
    acl.wait(c, ev)
    to_parent.put("waiting")
    t = now()
    rc_sync = acl.aclrtSynchronizeStreamWithTimeout(c, 20_000)
    elapsed = now() - t
    msg = acl.last_error()
    st = ctypes.c_int()
    rc_query = acl.aclrtQueryEventStatus(ev, ctypes.byref(st))
    t = now()
    rc_event_sync = acl.aclrtSynchronizeEvent(ev)
    event_sync_elapsed = now() - t
    to_parent.put(("result", rc_sync, elapsed, msg, rc_query, rc_event_sync, event_sync_elapsed))


@pytest.mark.parametrize("reap", [True, False], ids=["reaped", "zombie"])
def test_recorder_killed_before_record_ran(reap: bool) -> None:
    """A consumer blocked on an event whose recorder was SIGKILLed gets an error, not a hang.

    In the "zombie" case the parent does not reap the killed producer until
    the consumer answered: a zombie cannot run its record either.
    """
    ctx = spawn_context()
    to_cons, to_prod, to_parent = ctx.Queue(), ctx.Queue(), ctx.Queue()
    prod = ctx.Process(target=killed_producer, args=(to_cons, to_prod), daemon=True)
    cons = ctx.Process(target=orphaned_consumer, args=(to_cons, to_parent), daemon=True)
    prod.start()
    cons.start()
    try:
        assert to_parent.get(timeout=30) == "opened"
        to_prod.put("opened")
        assert to_parent.get(timeout=30) == "waiting"
        time.sleep(0.2)
        os.kill(prod.pid, signal.SIGKILL)
        if reap:
            prod.join(10)
        result = to_parent.get(timeout=15)
    finally:
        for p in (prod, cons):
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
    assert cons.exitcode == 0
    assert prod.exitcode == -signal.SIGKILL
    _, rc_sync, elapsed, msg, rc_query, rc_event_sync, event_sync_elapsed = result
    assert rc_sync != 0, "the wait on a dead recorder's event completed as if the record ran"
    assert rc_sync != ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, f"reported as a timeout, not a dead recorder: {msg}"
    assert elapsed < 3.0
    assert str(prod.pid) in msg
    assert rc_query != 0
    assert rc_event_sync != 0 and event_sync_elapsed < 3.0


ACL_ERROR_RT_NO_EVENT_RESOURCE = 207007
MAX_IPC = 3


def ipc_event_limit_worker(results: Any) -> None:
    """With ACLSIM_MAX_IPC_EVENTS=3: the 4th IPC event of a device fails; other kinds and devices do not."""
    os.environ["ACLSIM_MAX_IPC_EVENTS"] = str(MAX_IPC)  # read once, at the first ACL call
    acl = Acl()
    acl.set_device(0)
    evs = [acl.create_event(ACL_EVENT_IPC) for _ in range(MAX_IPC)]
    handle = acl.ipc_handle(evs[0])
    e = ctypes.c_void_p()
    over = acl.aclrtCreateEventExWithFlag(ctypes.byref(e), ACL_EVENT_IPC)
    message = acl.last_error()
    local = acl.create_event(ACL_EVENT_SYNC)  # only IPC events count
    opened = acl.open_ipc_handle(handle)  # opening takes no budget
    acl.check(acl.aclrtDestroyEvent(opened), "aclrtDestroyEvent")
    acl.check(acl.aclrtDestroyEvent(evs.pop()), "aclrtDestroyEvent")
    again = acl.create_event(ACL_EVENT_IPC)  # destroying one made room
    acl.set_device(1)
    other = [acl.create_event(ACL_EVENT_IPC) for _ in range(MAX_IPC)]  # per device
    for ev in [*evs, again, local, *other]:
        acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
    results.put((over, message))


@pytest.mark.devices(2)
def test_ipc_events_per_device_are_limited() -> None:
    """CANN allows a bounded number of IPC events per device; aclsim enforces it (ACLSIM_MAX_IPC_EVENTS)."""
    results = spawn_context().Queue()
    run([(ipc_event_limit_worker, (results,))])
    over, message = results.get(timeout=5)
    assert over == ACL_ERROR_RT_NO_EVENT_RESOURCE, over
    assert f"device 0 already has {MAX_IPC} IPC events" in message, message


MAX_LOCAL = 4


def local_event_limit_worker(results: Any) -> None:
    """With ACLSIM_MAX_EVENTS=4: the 5th local event of a device fails; IPC events and other devices do not."""
    os.environ["ACLSIM_MAX_EVENTS"] = str(MAX_LOCAL)  # read once, at the first ACL call
    acl = Acl()
    acl.set_device(0)
    evs = [
        acl.create_event(flags)
        for flags in (ACL_EVENT_SYNC, ACL_EVENT_TIME_LINE, ACL_EVENT_SYNC, ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE)
    ]
    e = ctypes.c_void_p()
    over = acl.aclrtCreateEventExWithFlag(ctypes.byref(e), ACL_EVENT_SYNC)
    message = acl.last_error()
    ipc = acl.create_event(ACL_EVENT_IPC)  # only local events count
    acl.check(acl.aclrtDestroyEvent(evs.pop()), "aclrtDestroyEvent")
    again = acl.create_event(ACL_EVENT_SYNC)  # destroying one made room
    acl.set_device(1)
    other = [acl.create_event(ACL_EVENT_SYNC) for _ in range(MAX_LOCAL)]  # per device
    for ev in [*evs, again, ipc, *other]:
        acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
    results.put((over, message))


@pytest.mark.devices(2)
def test_local_events_per_device_are_limited() -> None:
    """ACLSIM_MAX_EVENTS makes a device run out of local events the way CANN reports it (fault injection)."""
    results = spawn_context().Queue()
    run([(local_event_limit_worker, (results,))])
    over, message = results.get(timeout=5)
    assert over == ACL_ERROR_RT_NO_EVENT_RESOURCE, over
    assert f"device 0 already has {MAX_LOCAL} events" in message, message
