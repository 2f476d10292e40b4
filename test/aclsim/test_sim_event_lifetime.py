"""Event lifetime and wait status as CANN has them, through raw ACL (ctypes), torch-free.

- aclrtDestroyEvent does not wait for the event's issued work: the record and
  the waits already issued still run, and release the resources when done.
  The handle itself is dead at once: CANN's runtime clears the handle before
  deferring the release, so any later call naming it fails (CANN's docs: the
  caller must make sure no other call uses the event being destroyed).
  torch_npu 2.13 breaks that rule in the autograd engine's cross-device sync
  with its task queue on (see test/plugin/test_copies.py, ENGINE_RACE).
- aclrtQueryEventWaitStatus is about the WAIT tasks issued on the event, not
  its record: COMPLETE while no wait is issued (even with a pending record),
  NOT_READY while an issued wait has not finished. CANN rejects it on events
  made by aclrtCreateEventExWithFlag (and on IPC events).
- ACLSIM_TRACE_EVENTS=1 logs each event call (thread, handle, stream, result).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from typing import Any

from simacl import (
    ACL_EVENT_SYNC,
    ACL_EVENT_TIME_LINE,
    RECORDED_COMPLETE,
    RECORDED_NOT_READY,
    Acl,
    now,
    requires_aclsim,
    run,
    spawn_context,
)

import aclsim

pytestmark = requires_aclsim

ACL_ERROR_RT_PARAM_INVALID = 107000
ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000
WAIT_COMPLETE = 0
WAIT_NOT_READY = 1


def wait_status(acl: Acl, event: int) -> int:
    st = ctypes.c_int(-1)
    acl.check(acl.aclrtQueryEventWaitStatus(event, ctypes.byref(st)), "aclrtQueryEventWaitStatus")
    return st.value


def destroy_worker(results: Any) -> None:
    """Destroy with a pending record and a pending wait: issued work runs, the handle is dead."""
    acl = Acl()
    acl.set_device(0)
    a, b, c = acl.create_stream(), acl.create_stream(), acl.create_stream()
    ev = acl.create_event(ACL_EVENT_SYNC)
    out: dict[str, Any] = {}
    t0 = now()
    acl.sleep(a, 0.3)
    acl.record(ev, a)
    acl.wait(b, ev)  # issued before the destroy: bound to the pending record
    t = now()
    acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
    out["destroy_s"] = now() - t
    st = ctypes.c_int(-1)
    # Every later call naming the handle fails; the wait issued too late is
    # the torch_npu failure ("aclrtStreamWaitEvent: invalid event handle").
    out["late_wait"] = acl.aclrtStreamWaitEvent(c, ev)
    out["late_wait_msg"] = acl.last_error()
    out["late_record"] = acl.aclrtRecordEvent(ev, c)
    out["late_query"] = acl.aclrtQueryEventStatus(ev, ctypes.byref(st))
    out["late_destroy"] = acl.aclrtDestroyEvent(ev)
    acl.sync_stream(c)  # nothing waits there: returns at once
    out["c_done_s"] = now() - t0
    acl.sync_stream(b)  # the wait issued in time still holds B until the record ran
    out["b_done_s"] = now() - t0
    acl.sync_stream(a)
    results.put(out)


def test_destroy_kills_handle_at_once_issued_work_still_runs() -> None:
    """aclrtDestroyEvent returns at once; issued record/wait run; later calls on the handle fail."""
    results = spawn_context().Queue()
    run([(destroy_worker, (results,))])
    out = results.get(timeout=5)
    assert out["destroy_s"] < 0.1, out
    assert out["late_wait"] == ACL_ERROR_RT_PARAM_INVALID, out
    assert "aclrtStreamWaitEvent: invalid event handle" in out["late_wait_msg"], out
    assert out["late_record"] != 0 and out["late_query"] != 0 and out["late_destroy"] != 0, out
    assert out["c_done_s"] < 0.25, out
    assert out["b_done_s"] >= 0.29, out


def wait_status_worker(results: Any) -> None:
    """aclrtQueryEventWaitStatus reports the wait tasks, not the record."""
    acl = Acl()
    acl.set_device(0)
    a, b = acl.create_stream(), acl.create_stream()
    out: dict[str, Any] = {}
    for flags in (ACL_EVENT_SYNC, ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE):
        ev = acl.create_classic_event(flags)
        seen = [wait_status(acl, ev)]  # never recorded, never waited
        acl.sleep(a, 0.3)
        acl.record(ev, a)
        # A pending record with no wait issued: the record is NOT_READY, the
        # wait status COMPLETE (nothing waits on the event).
        seen += [acl.query_status(ev), wait_status(acl, ev)]
        acl.wait(b, ev)
        seen.append(wait_status(acl, ev))  # B's wait blocks until the record ran
        acl.sync_stream(b)
        seen += [acl.query_status(ev), wait_status(acl, ev)]
        acl.wait(b, ev)  # after the record ran: nothing to wait for
        acl.sync_stream(b)
        seen.append(wait_status(acl, ev))
        acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
        out[flags] = seen
    # Events made by aclrtCreateEventExWithFlag do not support the call.
    ex = acl.create_event(ACL_EVENT_SYNC)
    st = ctypes.c_int(-1)
    out["ex"] = acl.aclrtQueryEventWaitStatus(ex, ctypes.byref(st))
    acl.check(acl.aclrtDestroyEvent(ex), "aclrtDestroyEvent")
    results.put(out)


def test_query_event_wait_status_follows_wait_tasks() -> None:
    """COMPLETE until a wait is issued, NOT_READY while it blocks; unsupported on Ex events."""
    results = spawn_context().Queue()
    run([(wait_status_worker, (results,))])
    out = results.get(timeout=5)
    want = [
        WAIT_COMPLETE,
        RECORDED_NOT_READY,
        WAIT_COMPLETE,
        WAIT_NOT_READY,
        RECORDED_COMPLETE,
        WAIT_COMPLETE,
        WAIT_COMPLETE,
    ]
    assert out[ACL_EVENT_SYNC] == want, out
    assert out[ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE] == want, out
    assert out["ex"] == ACL_ERROR_RT_FEATURE_NOT_SUPPORT, out


TRACE_PROGRAM = """
import ctypes
lib = ctypes.CDLL("libascendcl.so")
assert lib.aclrtSetDevice(0) == 0
e = ctypes.c_void_p()
assert lib.aclrtCreateEventExWithFlag(ctypes.byref(e), 1) == 0
assert lib.aclrtRecordEvent(e, None) == 0
assert lib.aclrtDestroyEvent(e) == 0
assert lib.aclrtStreamWaitEvent(None, e) != 0
assert lib.aclrtSynchronizeDevice() == 0
"""


def run_raw(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", TRACE_PROGRAM], env=env, check=False, capture_output=True, text=True, timeout=60
    )


def test_trace_env_var_logs_event_calls() -> None:
    """ACLSIM_TRACE_EVENTS=1: one stderr line per event call, in order, with thread and result."""
    assert aclsim.is_active()
    env = dict(os.environ, ACLSIM_TRACE_EVENTS="1")
    r = run_raw(env)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("aclsim-trace ")]
    calls = [ln.split()[4] for ln in lines]
    assert calls == ["aclrtCreateEventExWithFlag", "aclrtRecordEvent", "aclrtDestroyEvent", "aclrtStreamWaitEvent"]
    assert all("tid=" in ln and "dev=0" in ln for ln in lines), lines
    assert lines[-1].split()[-2] == f"rc={ACL_ERROR_RT_PARAM_INVALID}", lines
    env.pop("ACLSIM_TRACE_EVENTS")
    quiet = run_raw(env)
    assert quiet.returncode == 0 and "aclsim-trace" not in quiet.stderr, quiet.stderr
