"""A stream wait binds only to a record already queued on its stream, through raw ACL (ctypes), torch-free.

Three host threads: R records X on stream A; W makes B wait for X, then
records Y on B; V makes A wait for Y. Every wait names a record whose call
was issued before it, so, as on CUDA and CANN, the streams always drain. A
runtime that makes a record the event's current one before its task is
queued lets W's wait bind to it in that window, and V's wait on A can then
land before R's record task: A waits for Y, Y (on B) for X, X is behind V's
wait on A, and the streams deadlock (and, their slots all pending, the
record calls block). ctypes releases the GIL in each call, so the threads
race in the runtime; before the fix a 2 s run deadlocked almost always.

The case "opened-ipc-handle" names X through two handles (the exported IPC
event and an open of its handle in the same process), as two processes
would; "one-local-event" races on one ordinary event.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
from simacl import ACL_EVENT_IPC, ACL_EVENT_SYNC, Acl, requires_aclsim, spawn_context

pytestmark = [requires_aclsim, pytest.mark.mode_independent]

RACE_SECONDS = 2.0
DRAIN_SECONDS = 10.0  # generous: the machine is shared; a deadlock never drains


def race_worker(ipc: bool, conn: Any) -> None:
    """Run the three threads for RACE_SECONDS; send whether everything they issued ran."""
    acl = Acl()
    acl.set_device(0)
    a, b = acl.create_stream(), acl.create_stream()
    flags = ACL_EVENT_IPC if ipc else ACL_EVENT_SYNC
    x_wait = acl.create_event(flags)
    x_record = acl.open_ipc_handle(acl.ipc_handle(x_wait)) if ipc else x_wait
    y = acl.create_event(flags)
    acl.record(x_wait, a)
    acl.record(y, b)
    stop = time.monotonic() + RACE_SECONDS
    issued = {"R": 0, "W": 0, "V": 0}
    errors: list[str] = []

    def loop(name: str, step: Any) -> None:
        try:
            acl.set_device(0)  # the current device is per thread
            while time.monotonic() < stop:
                step()
                issued[name] += 1
        except Exception as e:  # reported to the parent below
            errors.append(f"{name}: {e}")

    def w_step() -> None:
        acl.wait(b, x_wait)
        acl.record(y, b)

    steps = {"R": lambda: acl.record(x_record, a), "W": w_step, "V": lambda: acl.wait(a, y)}
    threads = [threading.Thread(target=loop, args=(n, f), name=n, daemon=True) for n, f in steps.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, stop + DRAIN_SECONDS - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    rcs = [] if stuck else [acl.aclrtSynchronizeStreamWithTimeout(s, int(DRAIN_SECONDS * 1000)) for s in (a, b)]
    conn.send({"issued": issued, "errors": errors, "stuck": stuck, "sync_rcs": rcs})
    conn.close()
    if stuck or any(rcs):
        os._exit(0)  # deadlocked streams: destroying them would hang
    for ev in {x_wait, x_record, y}:
        acl.check(acl.aclrtDestroyEvent(ev), "aclrtDestroyEvent")
    for s in (a, b):
        acl.check(acl.aclrtDestroyStream(s), "aclrtDestroyStream")


@pytest.mark.parametrize("ipc", [True, False], ids=["opened-ipc-handle", "one-local-event"])
def test_wait_never_binds_to_a_record_not_yet_queued(ipc: bool) -> None:
    """Concurrent record / wait / record / wait chains across two streams always drain."""
    ctx = spawn_context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=race_worker, args=(ipc, child), daemon=True)
    proc.start()
    child.close()
    try:
        assert parent.poll(RACE_SECONDS + 2 * DRAIN_SECONDS + 30), "the worker sent no result"
        got = parent.recv()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    assert not got["errors"], got
    assert not got["stuck"], f"threads blocked in ACL calls (streams deadlocked): {got}"
    assert got["sync_rcs"] == [0, 0], f"the streams did not drain (deadlocked): {got}"
    assert proc.exitcode == 0
    assert min(got["issued"].values()) > 100, f"too little concurrency to test anything: {got}"
