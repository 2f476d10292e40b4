"""Nothing outlives the processes: no /dev/shm objects, no stale names after a SIGKILL.

aclsim keeps device memory and IPC event tables in memfds (anonymous files
that vanish with their last descriptor or mapping) and hands them to other
processes over an abstract unix socket named after the exporter's pid and
pid namespace. The kernel drops an abstract name when its socket closes, so
a killed exporter leaves nothing behind, and a later process that reuses
the pid binds the same name without colliding. A stale key that reaches a
newcomer with that pid is refused: every export also carries a random 64-bit
nonce.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Any

import pytest
from simacl import ACL_EVENT_IPC, Acl, new_shm_entries, now, requires_aclsim, run, shm_entries, spawn_context

pytestmark = [requires_aclsim, pytest.mark.mode_independent]


def broker_names() -> set[str]:
    """Abstract unix socket names of aclsim IPC brokers currently bound on this machine."""
    names = set()
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 8 and parts[7].startswith("@aclsim-broker-"):
                names.add(parts[7])
    return names


def broker_name_of(pid: int) -> str:
    """The abstract name aclsim's broker binds in process `pid` (same pid namespace as ours)."""
    ns = os.readlink("/proc/self/ns/pid")
    return f"@aclsim-broker-{ns}-{pid}"


def open_files() -> list[str]:
    """Targets of this process's file descriptors."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the descriptor listdir itself used
            pass
    return out


def leak_exporter(to_imp: Any, to_exp: Any, report: Any) -> None:
    """Exports memory and an event; reports how its shared objects are backed."""
    acl = Acl()
    acl.set_device(0)
    p = acl.malloc(2 << 20)
    acl.h2d(p, b"leak-test")
    s = acl.create_stream()
    ev = acl.create_event(ACL_EVENT_IPC)
    to_imp.put((acl.export_key(p, 2 << 20, 0x1), acl.ipc_handle(ev)))
    assert to_exp.get(timeout=20) == "imported"
    acl.record(ev, s)
    acl.sync_stream(s)
    with open("/proc/self/maps") as f:
        maps = [line.split(None, 5)[-1].strip() for line in f if "aclsim" in line and "/lib/" not in line]
    report.put(("exporter", maps, [x for x in open_files() if "aclsim" in x or "shm" in x], os.getpid()))
    assert to_exp.get(timeout=20) == "done"


def leak_importer(to_imp: Any, to_exp: Any, report: Any) -> None:
    """Imports both and checks the bytes."""
    acl = Acl()
    acl.set_device(0)
    key, handle = to_imp.get(timeout=20)
    rc, q = acl.import_key_rc(key, 0)
    acl.check(rc, "aclrtIpcMemImportByKey")
    ev = acl.open_ipc_handle(handle)
    to_exp.put("imported")
    assert acl.d2h(q, 9) == b"leak-test"
    s = acl.create_stream()
    acl.wait(s, ev)
    acl.sync_stream(s)
    with open("/proc/self/maps") as f:
        maps = [line.split(None, 5)[-1].strip() for line in f if "aclsim" in line and "/lib/" not in line]
    acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose")
    report.put(("importer", maps, [], os.getpid()))
    to_exp.put("done")


def test_no_shm_objects_after_ipc_run() -> None:
    """A two-process IPC run (memory + event) creates nothing in /dev/shm; sharing is by memfd."""
    ctx = spawn_context()
    # multiprocessing's own queues keep named semaphores (sem.mp-*) in
    # /dev/shm while they live: create them before the snapshot.
    to_imp, to_exp, report = ctx.Queue(), ctx.Queue(), ctx.Queue()
    before = shm_entries()
    run([(leak_exporter, (to_imp, to_exp, report)), (leak_importer, (to_imp, to_exp, report))])
    got = {r[0]: r for r in (report.get(timeout=5) for _ in range(2))}
    for who in ("exporter", "importer"):
        maps = got[who][1]
        assert any("memfd:aclsim-device-memory" in m for m in maps), (who, maps)
        assert any("memfd:aclsim-ipc-event" in m for m in maps), (who, maps)
        assert all(m.startswith("/memfd:") for m in maps), (who, maps)
    fds = got["exporter"][2]
    assert fds and all(f.startswith("/memfd:aclsim-") for f in fds), fds
    new = new_shm_entries(before)
    assert not new, f"new /dev/shm entries after the run: {sorted(new)}"
    exporter_broker = broker_name_of(got["exporter"][3])
    assert exporter_broker not in broker_names(), "a broker name outlived its process"


def doomed_exporter(out: Any) -> None:
    """Exports memory and an event, then sleeps until killed."""
    acl = Acl()
    acl.set_device(0)
    p = acl.malloc(1 << 20)
    ev = acl.create_event(ACL_EVENT_IPC)
    out.put((os.getpid(), acl.export_key(p, 1 << 20, 0x1), acl.ipc_handle(ev)))
    time.sleep(60)


def stale_importer(key: bytes, handle: bytes, results: Any) -> None:
    """Imports a dead exporter's key and handle: both must fail promptly."""
    acl = Acl()
    acl.set_device(0)
    t = now()
    rc_mem, _ = acl.import_key_rc(key, 0)
    msg_mem = acl.last_error()
    rc_ev, _ = acl.open_ipc_handle_rc(handle)
    results.put((rc_mem, msg_mem, rc_ev, now() - t))


def impostor_server(sock: socket.socket, stop: threading.Event, served: list[int]) -> None:
    """Answers aclsim requests with garbage, like an unrelated process that reused the pid."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(2)
            try:
                conn.recv(256)
                conn.send(b"not an aclsim reply")
            except OSError:
                pass
            served.append(1)


def test_killed_exporter_leaves_nothing_and_names_cannot_collide() -> None:
    """SIGKILL an exporter: no /dev/shm entry, its broker name is released, stale keys fail promptly.

    The test then binds the dead exporter's broker name itself (what a new
    process that got the same pid would do): the bind succeeds, and a stale
    key that reaches this impostor is refused, not misread.
    """
    ctx = spawn_context()
    out = ctx.Queue()
    before = shm_entries()
    p = ctx.Process(target=doomed_exporter, args=(out,), daemon=True)
    p.start()
    try:
        pid, key, handle = out.get(timeout=30)
        name = broker_name_of(pid)
        assert name in broker_names(), "the exporter's broker is not listening under the documented name"
        os.kill(pid, signal.SIGKILL)
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join(5)
    assert p.exitcode == -signal.SIGKILL
    assert name not in broker_names()
    assert not new_shm_entries(before)

    results = ctx.Queue()
    run([(stale_importer, (key, handle, results))])
    rc_mem, msg_mem, rc_ev, took = results.get(timeout=5)
    assert rc_mem != 0 and rc_ev != 0
    assert str(pid) in msg_mem
    assert took < 5.0

    # A newcomer with the same pid can bind the same name: nothing stale blocks it.
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.bind("\0" + name[1:])
    sock.listen(4)
    stop, served = threading.Event(), []
    server = threading.Thread(target=impostor_server, args=(sock, stop, served), daemon=True)
    server.start()
    try:
        results = ctx.Queue()
        run([(stale_importer, (key, handle, results))])
        rc_mem, msg_mem, rc_ev, took = results.get(timeout=5)
    finally:
        stop.set()
        server.join(5)
        sock.close()
    assert served, "the stale key did not reach the process now owning the name"
    assert rc_mem != 0 and rc_ev != 0
    assert took < 10.0
