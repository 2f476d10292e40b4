"""CANN event semantics through raw ACL (ctypes), in spawned torch-free processes.

CANN documents (FACTS.md section 2): a wait is bound to the record that is
current when the wait is ISSUED; a wait issued before any record does
nothing; before the first record an event queries as COMPLETE. PyTorch's
torch_openreg simulator gets the first rule wrong (its wait checks whatever
record is current when the wait *runs*), so these tests build the exact
interleaving that tells the two apart.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
from simacl import (
    ACL_EVENT_IPC,
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

pytestmark = requires_aclsim

# Device work that a wrongly bound wait would hold a stream for, and the bound on a host sync that tells
# that apart from a wait bound to nothing (or to a record that already ran). The sync still involves
# waking threads: FAST leaves a loaded machine hundreds of ms for that, BUSY keeps a real wait far above.
BUSY = 0.8
FAST = BUSY / 2


def semantics_worker(flags: int, results: Any) -> None:
    """Checks query/wait/record semantics for one kind of event; asserts in-process."""
    acl = Acl()
    acl.set_device(0)
    a = acl.create_stream()
    b = acl.create_stream()
    ev = acl.create_event(flags)
    out: dict[str, float] = {}

    # Before any record: query says COMPLETE and synchronize returns at once.
    assert acl.query_status(ev) == RECORDED_COMPLETE
    t = now()
    acl.check(acl.aclrtSynchronizeEvent(ev), "aclrtSynchronizeEvent")
    assert now() - t < 0.1

    # A wait issued before any record is a no-op, even when a record is
    # issued right after it on a busy stream.
    acl.sleep(a, BUSY)
    acl.wait(b, ev)
    acl.record(ev, a)
    t = now()
    acl.sync_stream(b)
    out["noop_wait_release"] = now() - t
    assert out["noop_wait_release"] < FAST, out
    assert acl.stream_busy(a), f"stream A should still run its {BUSY} s of work"
    assert acl.query_status(ev) == RECORDED_NOT_READY
    acl.sync_stream(a)
    assert acl.query_status(ev) == RECORDED_COMPLETE

    # A wait binds to the record current when it is ISSUED: record #1 at
    # ~0.2 s, wait issued on B, then record #2 at ~0.2 s + BUSY. B is
    # released by record #1 while A still works toward record #2.
    t0 = now()
    acl.sleep(a, 0.2)
    acl.record(ev, a)
    acl.wait(b, ev)
    acl.sleep(a, BUSY)
    acl.record(ev, a)
    assert acl.query_status(ev) == RECORDED_NOT_READY
    acl.sync_stream(b)
    out["bound_wait_release"] = now() - t0
    a_busy_when_b_released = acl.stream_busy(a)
    acl.sync_stream(a)
    out["second_record_done"] = now() - t0
    assert 0.19 <= out["bound_wait_release"] < 0.2 + FAST, out
    assert a_busy_when_b_released, f"B waited for the second record: {out}"
    assert out["second_record_done"] >= 0.19 + BUSY, out
    assert acl.query_status(ev) == RECORDED_COMPLETE

    # A wait issued after the latest record already ran costs nothing.
    acl.sleep(a, BUSY)
    acl.wait(b, ev)
    t = now()
    acl.sync_stream(b)
    assert now() - t < FAST
    acl.sync_stream(a)

    # Host synchronize on a re-recorded event waits for the latest record.
    acl.sleep(a, 0.2)
    acl.record(ev, a)
    t = now()
    acl.check(acl.aclrtSynchronizeEvent(ev), "aclrtSynchronizeEvent")
    out["event_sync"] = now() - t
    assert 0.19 <= out["event_sync"] < 0.2 + BUSY, out
    acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
    results.put(out)


@pytest.mark.parametrize("flags", [ACL_EVENT_SYNC, ACL_EVENT_IPC], ids=["local", "ipc"])
def test_event_semantics(flags: int) -> None:
    """Wait binds at issue time; wait-before-record is a no-op; query-before-record is COMPLETE."""
    results = spawn_context().Queue()
    run([(semantics_worker, (flags, results))])
    out = results.get(timeout=5)
    assert out["bound_wait_release"] < out["second_record_done"]


def timing_worker(results: Any) -> None:
    """Elapsed time between two timing events reflects simulated device time."""
    acl = Acl()
    acl.set_device(0)
    s = acl.create_stream()
    e1 = acl.create_event(ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE)
    e2 = acl.create_event(ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE)
    acl.record(e1, s)
    # aclsim counts a sleep on an idle stream from its launch but stamps a record when the stream's thread
    # runs it: a thread late to run e1 (a loaded machine) made the interval shorter than the work.
    acl.sync_stream(s)
    acl.sleep(s, 0.2)
    acl.record(e2, s)
    ms = ctypes.c_float(-1)
    # Elapsed time of records that have not run is an error, not garbage.
    early = acl.aclrtEventElapsedTime(ctypes.byref(ms), e1, e2)
    acl.sync_stream(s)
    acl.check(acl.aclrtEventElapsedTime(ctypes.byref(ms), e1, e2), "aclrtEventElapsedTime")
    ts = ctypes.c_uint64(0)
    acl.check(acl.aclrtEventGetTimestamp(e2, ctypes.byref(ts)), "aclrtEventGetTimestamp")
    results.put((early, ms.value, ts.value))


def test_elapsed_time_reflects_simulated_work() -> None:
    """aclrtEventElapsedTime around 0.2 s of simulated work reports ~200 ms."""
    results = spawn_context().Queue()
    run([(timing_worker, (results,))])
    early, ms, ts = results.get(timeout=5)
    assert early != 0
    assert 195.0 <= ms < 1200.0  # generous above: the end record's thread may be late on a loaded machine
    assert ts > 0


def wait_task_worker(results: Any) -> None:
    """Waits on events of several flags: only those with a wait task can be waited on."""
    acl = Acl()
    acl.set_device(0)
    s = acl.create_stream()
    codes = {}
    for name, flags in (
        ("time-line", ACL_EVENT_TIME_LINE),
        ("sync", ACL_EVENT_SYNC),
        ("sync+time-line", ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE),
        ("ipc", ACL_EVENT_IPC),
    ):
        ev = acl.create_event(flags)
        acl.record(ev, s)
        codes[name] = acl.aclrtStreamWaitEvent(s, ev)
    acl.sync_stream(s)
    results.put(codes)


def test_only_events_with_a_wait_task_can_be_waited_on() -> None:
    """As CANN: aclrtStreamWaitEvent refuses an event with ACL_EVENT_TIME_LINE alone (no wait task)."""
    results = spawn_context().Queue()
    run([(wait_task_worker, (results,))])
    codes = results.get(timeout=5)
    assert codes.pop("time-line") != 0, "a wait on a timing-only event was accepted"
    assert all(v == 0 for v in codes.values()), codes


def reset_worker(results: Any) -> None:
    """Reset, then record, on one busy stream: the record survives the reset's task, which runs before it."""
    acl = Acl()
    acl.set_device(0)
    a, b = acl.create_stream(), acl.create_stream()
    ev = acl.create_classic_event(ACL_EVENT_SYNC)
    acl.record(ev, a)
    acl.sync_stream(a)
    t0 = now()
    acl.sleep(a, 0.2)
    acl.check(acl.aclrtResetEvent(ev, a), "aclrtResetEvent")  # runs at about 0.2 s
    acl.sleep(a, 0.6)
    acl.record(ev, a)  # runs at about 0.8 s
    while now() - t0 < 0.4:  # the reset ran, the record has not
        acl.sleep(b, 0.01)
        acl.sync_stream(b)
    status = acl.query_status(ev)
    acl.wait(b, ev)  # bound to the pending record: b waits for it
    acl.sync_stream(b)
    waited_until = now() - t0
    acl.sync_stream(a)
    results.put((status, waited_until, acl.query_status(ev)))


def test_a_record_issued_after_a_reset_survives_it() -> None:
    """aclrtResetEvent's task ran after a record issued behind it and wiped that record.

    Records are published when issued and a reset ran in stream order, so the event then looked never
    recorded: queried complete and waited for nothing while its record was still to run.
    """
    results = spawn_context().Queue()
    run([(reset_worker, (results,))])
    status, waited_until, final = results.get(timeout=5)
    assert status == RECORDED_NOT_READY, "the reset's task wiped the record issued after it"
    assert waited_until >= 0.75, f"a wait on the pending record returned at {waited_until:.2f} s, before it ran"
    assert final == RECORDED_COMPLETE
