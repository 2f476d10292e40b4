"""IPC memory between spawned processes through raw ACL (ctypes).

aclrtIpcMemGetExportKey / SetImportPid / ImportByKey / Close: the importer
maps the exporter's device memory (a memfd) and both see the same bytes.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import pytest
from simacl import (
    IPC_EXPORT_DISABLE_PID_VALIDATION,
    IPC_IMPORT_ENABLE_PEER_ACCESS,
    IPC_KEY_LEN,
    Acl,
    counters_delta,
    requires_aclsim,
    run,
    spawn_context,
)

import aclsim

pytestmark = [requires_aclsim, pytest.mark.mode_independent]

SIZE = 2 << 20
PATTERN = bytes(range(256)) * 16  # 4 KiB
TAIL = b"end-of-block"


def pid_exporter(to_imp: Any, to_exp: Any, results: Any) -> None:
    """Exports device memory with pid validation on; allows the importer later."""
    acl = Acl()
    acl.set_device(0)
    before = aclsim.counters()
    p = acl.malloc(SIZE)
    acl.h2d(p, PATTERN)
    acl.h2d(p + SIZE - len(TAIL), TAIL)
    importer_pid = to_exp.get(timeout=20)
    key = acl.export_key(p, SIZE, 0)
    assert len(key) == IPC_KEY_LEN and key[-1] == 0 and key.rstrip(b"\0")
    acl.set_import_pids(key, [1])  # some other process: still refused
    to_imp.put(key)
    assert to_exp.get(timeout=20) == "refused"
    acl.set_import_pids(key, [importer_pid])
    to_imp.put("allowed")
    assert to_exp.get(timeout=20) == "written"
    # The importer's write is visible here.
    assert acl.d2h(p + 100, 5) == b"HELLO"
    assert acl.d2h(p, 100) == PATTERN[:100]
    to_imp.put("checked")
    assert to_exp.get(timeout=20) == "closed"
    # Closing the key on the exporter side retracts the export.
    acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose(exporter)")
    to_imp.put("retracted")
    assert to_exp.get(timeout=20) == "done"
    acl.check(acl.aclrtFree(p), "aclrtFree")
    results.put(("exporter", counters_delta(before)))


def pid_importer(to_imp: Any, to_exp: Any, results: Any) -> None:
    """Imports by key: refused until its pid is allowed; reads and writes the shared bytes."""
    acl = Acl()
    acl.set_device(0)
    before = aclsim.counters()
    to_exp.put(os.getpid())
    key = to_imp.get(timeout=20)
    rc, _ = acl.import_key_rc(key, 0)
    refused_msg = acl.last_error()
    assert rc != 0, "import succeeded although the importer's pid was not allowed"
    assert str(os.getpid()) in refused_msg, refused_msg
    to_exp.put("refused")
    assert to_imp.get(timeout=20) == "allowed"
    rc, q = acl.import_key_rc(key, 0)
    acl.check(rc, "aclrtIpcMemImportByKey")
    assert acl.d2h(q, len(PATTERN)) == PATTERN
    assert acl.d2h(q + SIZE - len(TAIL), len(TAIL)) == TAIL
    acl.h2d(q + 100, b"HELLO")
    to_exp.put("written")
    assert to_imp.get(timeout=20) == "checked"
    acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose(importer)")
    double_close = acl.aclrtIpcMemClose(key)
    # The mapping is gone: the range is no longer device memory here.
    buf = ctypes.create_string_buffer(5)
    stale_copy = acl.aclrtMemcpy(buf, 5, q + 100, 5, 2)
    to_exp.put("closed")
    assert to_imp.get(timeout=20) == "retracted"
    rc_after_retract, _ = acl.import_key_rc(key, 0)
    to_exp.put("done")
    results.put(("importer", counters_delta(before), double_close, stale_copy, rc_after_retract))


def test_export_import_with_pid_validation() -> None:
    """Same bytes both ways; refused until aclrtIpcMemSetImportPid lists the importer; close retracts."""
    ctx = spawn_context()
    to_imp, to_exp, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    run([(pid_exporter, (to_imp, to_exp, results)), (pid_importer, (to_imp, to_exp, results))])
    got = {r[0]: r for r in (results.get(timeout=5) for _ in range(2))}
    _, exp_counts = got["exporter"]
    _, imp_counts, double_close, stale_copy, rc_after_retract = got["importer"]
    assert exp_counts.get("ipc_mem_export") == 1
    assert exp_counts.get("ipc_mem_close") == 1
    assert imp_counts.get("ipc_mem_import") == 1
    assert imp_counts.get("ipc_mem_close") == 1
    assert double_close != 0
    assert stale_copy != 0
    assert rc_after_retract != 0


def peer_exporter(to_imp: Any, to_exp: Any) -> None:
    """Exports with pid validation disabled (flag 0x1)."""
    acl = Acl()
    acl.set_device(0)
    p = acl.malloc(SIZE)
    acl.h2d(p, PATTERN)
    to_imp.put(acl.export_key(p, SIZE, IPC_EXPORT_DISABLE_PID_VALIDATION))
    assert to_exp.get(timeout=20) == "written"
    assert acl.d2h(p + 8, 4) == b"PEER"
    to_imp.put("ok")
    assert to_exp.get(timeout=20) == "done"


def peer_importer(to_imp: Any, to_exp: Any, results: Any) -> None:
    """Imports without SetImportPid; on device 1, only with the peer-access flag."""
    acl = Acl()
    key = to_imp.get(timeout=20)
    acl.set_device(1)
    rc_no_peer, _ = acl.import_key_rc(key, 0)
    rc_bad_flag, _ = acl.import_key_rc(key, 0x80)
    rc_peer, q = acl.import_key_rc(key, IPC_IMPORT_ENABLE_PEER_ACCESS)
    acl.check(rc_peer, "aclrtIpcMemImportByKey(peer)")
    assert acl.d2h(q, len(PATTERN)) == PATTERN
    acl.h2d(q + 8, b"PEER")
    to_exp.put("written")
    assert to_imp.get(timeout=20) == "ok"
    acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose")
    # Same device needs no flag (and no pid allow-list: export flag 0x1).
    acl.set_device(0)
    rc_same, q0 = acl.import_key_rc(key, 0)
    same_ok = rc_same == 0 and acl.d2h(q0 + 8, 4) == b"PEER"
    if rc_same == 0:
        acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose")
    to_exp.put("done")
    results.put((rc_no_peer, rc_bad_flag, same_ok))


@pytest.mark.devices(2)
def test_no_pid_validation_and_peer_import() -> None:
    """Export flag 0x1 skips pid checks; import on another device needs import flag 0x1."""
    ctx = spawn_context()
    to_imp, to_exp, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    run([(peer_exporter, (to_imp, to_exp)), (peer_importer, (to_imp, to_exp, results))])
    rc_no_peer, rc_bad_flag, same_ok = results.get(timeout=5)
    assert rc_no_peer != 0
    assert rc_bad_flag != 0
    assert same_ok


def list_exporter(to_imp: Any, to_exp: Any, results: Any) -> None:
    """Exports a block and imports its own key: a close takes the import first, then the export."""
    acl = Acl()
    acl.set_device(0)
    p = acl.malloc(SIZE)
    acl.h2d(p, PATTERN)
    key = acl.export_key(p, SIZE, IPC_EXPORT_DISABLE_PID_VALIDATION)
    to_imp.put(key)
    assert to_exp.get(timeout=20) == "done"
    rc, own = acl.import_key_rc(key, 0)
    acl.check(rc, "aclrtIpcMemImportByKey(own key)")
    own_ok = own != p and acl.d2h(own, 4) == PATTERN[:4] and acl.d2h(own + 4, 4) == b"LIST"
    acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose")  # unmaps the import
    buf = ctypes.create_string_buffer(4)
    own_gone = acl.aclrtMemcpy(buf, 4, own, 4, 2) != 0
    reimport_rc, _ = acl.import_key_rc(key, 0)  # still exported
    if reimport_rc == 0:
        acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose")
    acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose")  # no import left: retracts the export
    retracted_rc, _ = acl.import_key_rc(key, 0)
    results.put(("exporter", own_ok, own_gone, reimport_rc, retracted_rc))


def list_importer(to_imp: Any, to_exp: Any, results: Any) -> None:
    """Imports one key on device 0, then device 1: two mappings; each close unmaps the oldest one."""
    acl = Acl()
    key = to_imp.get(timeout=20)
    before = aclsim.counters()
    acl.set_device(0)
    rc, q0 = acl.import_key_rc(key, 0)
    acl.check(rc, "aclrtIpcMemImportByKey(device 0)")
    acl.set_device(1)
    rc, q1 = acl.import_key_rc(key, IPC_IMPORT_ENABLE_PEER_ACCESS)
    acl.check(rc, "aclrtIpcMemImportByKey(device 1)")
    distinct = q0 != q1
    acl.h2d(q1 + 4, b"LIST")
    shared = acl.d2h(q0 + 4, 4) == b"LIST"
    buf = ctypes.create_string_buffer(4)
    acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose")  # with device 1 current: unmaps q0
    first = (acl.aclrtMemcpy(buf, 4, q0, 4, 2) != 0, acl.d2h(q1 + 4, 4) == b"LIST")
    acl.check(acl.aclrtIpcMemClose(key), "aclrtIpcMemClose")
    second = acl.aclrtMemcpy(buf, 4, q1, 4, 2) != 0
    third = acl.aclrtIpcMemClose(key)
    to_exp.put("done")
    results.put(("importer", distinct, shared, first, second, third, counters_delta(before)))


@pytest.mark.devices(2)
def test_each_import_maps_anew_and_close_unmaps_the_oldest() -> None:
    """As CANN's runtime: per key a list of the process's imports; aclrtIpcMemClose unmaps the oldest.

    Importing one key on two devices gives two mappings of the same bytes; the
    first close unmaps the first import whatever device is current, the next
    one the second, a third fails. A process that imports its own key loses
    that import to its first close, and its export to the next one.
    """
    ctx = spawn_context()
    to_imp, to_exp, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    run([(list_exporter, (to_imp, to_exp, results)), (list_importer, (to_imp, to_exp, results))])
    got = {r[0]: r for r in (results.get(timeout=5) for _ in range(2))}
    _, distinct, shared, first, second, third, counts = got["importer"]
    assert distinct and shared
    assert first == (True, True), "the first close did not unmap exactly the oldest import"
    assert second and third != 0
    assert counts.get("ipc_mem_import") == 2 and counts.get("ipc_mem_close") == 2, counts
    _, own_ok, own_gone, reimport_rc, retracted_rc = got["exporter"]
    assert own_ok, "importing its own key did not map the bytes anew"
    assert own_gone, "the first close did not unmap the process's own import"
    assert reimport_rc == 0, "the close meant for the process's own import retracted its export"
    assert retracted_rc != 0, "the close with no import left did not retract the export"


def export_checks_worker(results: Any) -> None:
    """Argument checks of aclrtIpcMemGetExportKey in one process."""
    acl = Acl()
    acl.set_device(0)
    p = acl.malloc(SIZE)
    host = ctypes.c_void_p()
    acl.check(acl.aclrtMallocHost(ctypes.byref(host), 8192), "aclrtMallocHost")
    small = ctypes.create_string_buffer(64)
    page = os.sysconf("SC_PAGESIZE")
    codes = {
        "unaligned": acl.export_key_rc(p + 1, 4096, 0)[0],
        "unaligned-by-64": acl.export_key_rc(p + 64, 4096, 0)[0],
        "beyond-allocation": acl.export_key_rc(p, SIZE + page, 0)[0],
        "size-0": acl.export_key_rc(p, 0, 0)[0],
        "host-memory": acl.export_key_rc(host.value, 4096, 0)[0],
        "unknown-flags": acl.export_key_rc(p, SIZE, 0x10)[0],
        "key-buffer-64": acl.aclrtIpcMemGetExportKey(p, SIZE, small, 64, 0),
        "stack-pointer": acl.export_key_rc(ctypes.addressof(small) & ~(page - 1), 4096, 0)[0],
        "set-pid-unknown-key": acl.aclrtIpcMemSetImportPid(b"aclsim:m:1:1:0000000000000001", None, 0),
    }
    ok = {
        "aligned-inner-page": acl.export_key_rc(p + page, page, 0)[0],
        "whole-block": acl.export_key_rc(p, SIZE, IPC_EXPORT_DISABLE_PID_VALIDATION)[0],
    }
    results.put((codes, ok))


def test_export_argument_checks() -> None:
    """Unaligned, out-of-range, host and foreign pointers are refused; page-aligned inner ranges work."""
    results = spawn_context().Queue()
    run([(export_checks_worker, (results,))])
    codes, ok = results.get(timeout=5)
    zero = [k for k, v in codes.items() if v == 0]
    assert not zero, f"accepted: {zero}"
    assert all(v == 0 for v in ok.values()), ok


def _bare_tgid(acl: Acl) -> int:
    pid = ctypes.c_int32()
    acl.check(acl.aclrtDeviceGetBareTgid(ctypes.byref(pid)), "aclrtDeviceGetBareTgid")
    return pid.value


def tgid_after_fork_worker(results: Any) -> None:
    """The pid the runtime reports (and stamps on exports and event records) in a parent and its forked child."""
    acl = Acl()
    acl.set_device(0)
    parent = _bare_tgid(acl)  # read, and cached, before the fork
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        os.write(w, f"{_bare_tgid(acl)} {os.getpid()}".encode())
        os._exit(0)
    os.close(w)
    reported, actual = (int(v) for v in os.read(r, 64).split())
    os.close(r)
    _, status = os.waitpid(child, 0)
    results.put((parent, os.getpid(), reported, actual, status))


def test_forked_child_reports_its_own_pid() -> None:
    """aclsim caches the pid (glibc's getpid() is a system call): a forked child must not inherit the parent's."""
    results = spawn_context().Queue()
    run([(tgid_after_fork_worker, (results,))])
    parent, parent_actual, reported, actual, status = results.get(timeout=10)
    assert status == 0
    assert parent == parent_actual
    assert reported == actual != parent
