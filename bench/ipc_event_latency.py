"""Cross-process IPC event signal latency under aclsim, beside a pipe round trip.

    python bench/ipc_event_latency.py [--iters N] [--gate-us US] [--cross-device] [--json]

Two real processes, A (this one) and B (a child), talk to libascendcl.so
through ctypes. A creates two IPC events, E1 (A -> B) and E2 (B -> A), and
hands both to B. Each iteration:

  A   enqueues on its stream: a short device delay (the "gate"), a record of
      a local timing event L, a record of E1; then tells B over a pipe.
  B   enqueues on its stream: wait(E1), record(E2); tells A; then blocks its
      host in aclrtSynchronizeEvent(E1).
  A   blocks its host in aclrtSynchronizeEvent(E2).
  gate ends -> L and E1 are recorded -> B's host and B's stream wake up ->
  B's stream records E2 -> A's host wakes up.

The gate makes sure both waits are issued (and bound to this iteration's
records) before the records run; iterations where that did not hold are
discarded and counted. Times are CLOCK_MONOTONIC, which all processes on a
host share:

  t0  when L's record ran (aclrtEventGetTimestamp; aclsim reports
      CLOCK_MONOTONIC in microseconds, so t0 may be up to 1 us early:
      latencies err on the high side). E1's record is the next task on the
      same stream.
  t1  when B's aclrtSynchronizeEvent(E1) returned (B's clock = A's clock).
  t2  when A's aclrtSynchronizeEvent(E2) returned.

Reported: the one-way signal latency t1 - t0 (record task ran -> host
blocked in another process woke up); the event round trip t2 - t0 (A ->
B's stream -> A's host), and half of it, which needs no cross-process clock
comparison; and, in the same run between the same two processes, half of an
os.pipe ping-pong round trip. Everything is measured from Python, so each
figure includes a ctypes/os call's return (about a microsecond).

``main(argv)`` returns the results as a dict (for ``python -m torch_npu_ipc.bench``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from typing import Any

import aclsim

ACL_EVENT_IPC = 0x40
ACL_ERROR_REPEAT_INITIALIZE = 100002
GOAL_US = 50.0
# ``python -m torch_npu_ipc.bench --quick``: a short smoke run.
QUICK_ARGS = ["--iters", "200", "--warmup", "20"]
# The runner skips this benchmark where interprocess events are unsupported.
NEEDS_IPC_EVENTS = True
CHILD_TIMEOUT_S = 60.0
SYNC_TIMEOUT_MS = 30_000  # a lost signal fails the run instead of hanging it

_SYNC_OK = struct.Struct("<q")  # B -> A after issuing its wait and record: time B starts waiting
_SYNC_DONE = struct.Struct("<qq")  # B -> A after waking: (time B started waiting, time B woke)
_STAMP = struct.Struct("<q")  # a CLOCK_MONOTONIC time in ns


class IpcEventHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class Acl:
    """The handful of ACL calls the benchmark needs, with return codes checked."""

    def __init__(self) -> None:
        lib = _runtime()
        p, vp, u32, i32, u64 = ctypes.POINTER, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64
        sigs = {
            "aclInit": [ctypes.c_char_p],
            "aclFinalize": [],
            "aclrtSetDevice": [i32],
            "aclrtResetDevice": [i32],
            "aclrtCreateStream": [p(vp)],
            "aclrtDestroyStream": [vp],
            "aclrtSynchronizeStream": [vp],
            "aclrtCreateEvent": [p(vp)],
            "aclrtCreateEventExWithFlag": [p(vp), u32],
            "aclrtDestroyEvent": [vp],
            "aclrtRecordEvent": [vp, vp],
            "aclrtStreamWaitEvent": [vp, vp],
            "aclrtSynchronizeEventWithTimeout": [vp, i32],
            "aclrtEventGetTimestamp": [vp, p(u64)],
            "aclrtIpcGetEventHandle": [vp, p(IpcEventHandle)],
            "aclrtIpcOpenEventHandle": [IpcEventHandle, p(vp)],
        }
        for name, argtypes in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
            setattr(self, name, fn)
        lib.aclGetRecentErrMsg.restype = ctypes.c_char_p
        self._msg = lib.aclGetRecentErrMsg

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            msg = self._msg()
            raise RuntimeError(f"{what} failed with ACL error {rc}: {msg.decode(errors='replace') if msg else ''}")

    def init(self, device: int) -> None:
        rc = self.aclInit(None)
        if rc not in (0, ACL_ERROR_REPEAT_INITIALIZE):  # already initialized in this process is fine
            self.check(rc, "aclInit")
        self.check(self.aclrtSetDevice(device), "aclrtSetDevice")

    def stream(self) -> ctypes.c_void_p:
        s = ctypes.c_void_p()
        self.check(self.aclrtCreateStream(ctypes.byref(s)), "aclrtCreateStream")
        return s

    def ipc_event(self) -> ctypes.c_void_p:
        e = ctypes.c_void_p()
        self.check(self.aclrtCreateEventExWithFlag(ctypes.byref(e), ACL_EVENT_IPC), "aclrtCreateEventExWithFlag")
        return e

    def local_event(self) -> ctypes.c_void_p:
        e = ctypes.c_void_p()
        self.check(self.aclrtCreateEvent(ctypes.byref(e)), "aclrtCreateEvent")
        return e

    def export(self, event: ctypes.c_void_p) -> bytes:
        h = IpcEventHandle()
        self.check(self.aclrtIpcGetEventHandle(event, ctypes.byref(h)), "aclrtIpcGetEventHandle")
        return bytes(h)

    def open(self, raw: bytes) -> ctypes.c_void_p:
        h = IpcEventHandle.from_buffer_copy(raw)
        e = ctypes.c_void_p()
        self.check(self.aclrtIpcOpenEventHandle(h, ctypes.byref(e)), "aclrtIpcOpenEventHandle")
        return e

    def timestamp_ns(self, event: ctypes.c_void_p) -> int:
        us = ctypes.c_uint64()
        self.check(self.aclrtEventGetTimestamp(event, ctypes.byref(us)), "aclrtEventGetTimestamp")
        return us.value * 1000


def _runtime() -> ctypes.CDLL:
    runtime = getattr(aclsim, "runtime", None)
    if runtime is None:
        from aclsim._env import runtime
    return runtime()


def _activate() -> None:
    if not aclsim.is_active():
        aclsim.activate()  # $ACLSIM_DEVICES or aclsim's default (2); B inherits it


def _read_exact(fd: int, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise RuntimeError("the other benchmark process closed its pipe")
        buf += chunk
    return buf


# --- process B ----------------------------------------------------------------


def _child(rfd: int, wfd: int, device: int) -> int:
    acl = Acl()
    acl.init(device)
    stream = acl.stream()
    e1 = acl.open(_read_exact(rfd, 64))
    e2 = acl.open(_read_exact(rfd, 64))
    os.write(wfd, b"R")
    sync = acl.aclrtSynchronizeEventWithTimeout
    wait, record = acl.aclrtStreamWaitEvent, acl.aclrtRecordEvent
    clock = time.monotonic_ns
    while True:
        cmd = _read_exact(rfd, 1)
        if cmd == b"P":  # pipe ping-pong
            os.write(wfd, b"p")
        elif cmd == b"T":  # pipe one-way after an idle gap: B was blocked in read()
            woke = clock()
            _read_exact(rfd, _STAMP.size)
            os.write(wfd, _STAMP.pack(woke))
        elif cmd == b"E":  # one event iteration, armed by A
            acl.check(wait(stream, e1), "aclrtStreamWaitEvent")
            acl.check(record(e2, stream), "aclrtRecordEvent")
            start = clock()
            os.write(wfd, _SYNC_OK.pack(start))
            rc = sync(e1, SYNC_TIMEOUT_MS)
            woke = clock()
            acl.check(rc, "aclrtSynchronizeEventWithTimeout")
            os.write(wfd, _SYNC_DONE.pack(start, woke))
        elif cmd == b"Q":
            break
        else:
            raise RuntimeError(f"unknown command {cmd!r}")
    acl.check(acl.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
    for e in (e1, e2):
        acl.check(acl.aclrtDestroyEvent(e), "aclrtDestroyEvent")
    acl.check(acl.aclrtDestroyStream(stream), "aclrtDestroyStream")
    acl.check(acl.aclrtResetDevice(device), "aclrtResetDevice")
    os.write(wfd, b"D")
    return 0


# --- process A ----------------------------------------------------------------


def _stats(values_ns: list[int]) -> dict[str, float]:
    us = sorted(v / 1000.0 for v in values_ns)
    if not us:
        return {"n": 0, "median_us": float("nan"), "p90_us": float("nan"), "min_us": float("nan")}
    p90 = us[min(len(us) - 1, round(0.9 * (len(us) - 1)))]
    return {"n": len(us), "median_us": statistics.median(us), "p90_us": p90, "min_us": us[0]}


def _measure(iters: int, warmup: int, gate_us: int, device_b: int) -> dict[str, Any]:
    acl = Acl()
    acl.init(0)
    stream = acl.stream()
    e1, e2, mark = acl.ipc_event(), acl.ipc_event(), acl.local_event()
    a2b_r, a2b_w = os.pipe()
    b2a_r, b2a_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--child", str(a2b_r), str(b2a_w), str(device_b)],
        pass_fds=(a2b_r, b2a_w),
    )
    os.close(a2b_r)
    os.close(b2a_w)
    rfd, wfd = b2a_r, a2b_w
    try:
        os.write(wfd, acl.export(e1) + acl.export(e2))
        if _read_exact(rfd, 1) != b"R":
            raise RuntimeError("process B failed to start")
        record, sync = acl.aclrtRecordEvent, acl.aclrtSynchronizeEventWithTimeout
        stream_ptr = stream.value
        clock = time.monotonic_ns
        pipe_rtt: list[int] = []
        pipe_idle: list[int] = []
        one_way: list[int] = []
        round_trip: list[int] = []
        discarded = 0
        for i in range(warmup + iters):
            # Pipe ping-pong between the same two processes.
            t = clock()
            os.write(wfd, b"P")
            _read_exact(rfd, 1)
            rtt = clock() - t
            # Pipe one-way after the same idle gap as the event's gate.
            time.sleep(gate_us / 1e6)
            t = clock()
            os.write(wfd, b"T" + _STAMP.pack(t))
            (woke,) = _STAMP.unpack(_read_exact(rfd, _STAMP.size))
            idle = woke - t
            # Event iteration.
            aclsim.sleep(stream_ptr, gate_us / 1e6)
            acl.check(record(mark, stream), "aclrtRecordEvent")
            acl.check(record(e1, stream), "aclrtRecordEvent")
            os.write(wfd, b"E")
            _read_exact(rfd, _SYNC_OK.size)
            a_start = clock()
            rc = sync(e2, SYNC_TIMEOUT_MS)
            t2 = clock()
            acl.check(rc, "aclrtSynchronizeEventWithTimeout")
            b_start, t1 = _SYNC_DONE.unpack(_read_exact(rfd, _SYNC_DONE.size))
            t0 = acl.timestamp_ns(mark)
            if i < warmup:
                continue
            pipe_rtt.append(rtt)
            pipe_idle.append(idle)
            if max(a_start, b_start) >= t0:  # a wait was issued after the record ran: not a blocked wake-up
                discarded += 1
                continue
            one_way.append(t1 - t0)
            round_trip.append(t2 - t0)
        os.write(wfd, b"Q")
        if _read_exact(rfd, 1) != b"D":
            raise RuntimeError("process B did not finish cleanly")
        child.wait(timeout=CHILD_TIMEOUT_S)
        if child.returncode != 0:
            raise RuntimeError(f"process B exited with {child.returncode}")
    finally:
        os.close(rfd)
        os.close(wfd)
        if child.poll() is None:
            try:
                child.wait(timeout=CHILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    acl.check(acl.aclrtSynchronizeStream(stream), "aclrtSynchronizeStream")
    for e in (e1, e2, mark):
        acl.check(acl.aclrtDestroyEvent(e), "aclrtDestroyEvent")
    acl.check(acl.aclrtDestroyStream(stream), "aclrtDestroyStream")
    acl.check(acl.aclrtResetDevice(0), "aclrtResetDevice")

    pipe_one_way = _stats([v // 2 for v in pipe_rtt])
    event_one_way = _stats(one_way)
    event_rtt = _stats(round_trip)
    event_half_rtt = _stats([v // 2 for v in round_trip])
    pipe_idle_stats = _stats(pipe_idle)
    return {
        "iters": iters,
        "warmup": warmup,
        "gate_us": gate_us,
        "device_a": 0,
        "device_b": device_b,
        "discarded": discarded,
        "event_one_way": event_one_way,
        "event_round_trip": event_rtt,
        "event_half_round_trip": event_half_rtt,
        "pipe_half_round_trip": pipe_one_way,
        "pipe_one_way_after_idle": pipe_idle_stats,
        "ratio_event_to_pipe": event_one_way["median_us"] / pipe_one_way["median_us"],
        "ratio_event_to_idle_pipe": event_one_way["median_us"] / pipe_idle_stats["median_us"],
        "goal_us": GOAL_US,
        "meets_goal": event_one_way["median_us"] <= GOAL_US,
    }


def _print(r: dict[str, Any]) -> None:
    where = "same device" if r["device_a"] == r["device_b"] else f"device {r['device_a']} -> {r['device_b']}"
    print(f"IPC event signal latency under aclsim ({where}, {r['iters']} iterations, gate {r['gate_us']} us, "
          f"{r['discarded']} discarded)")  # fmt: skip
    rows = [
        ("event one-way: record ran -> other process's host wakes", r["event_one_way"]),
        ("event round trip: A record -> B stream -> A host", r["event_round_trip"]),
        ("event round trip / 2", r["event_half_round_trip"]),
        ("pipe round trip / 2 (os.pipe ping-pong)", r["pipe_half_round_trip"]),
        ("pipe one-way, reader blocked for the same gap", r["pipe_one_way_after_idle"]),
    ]
    print(f"  {'':58s} {'median':>9s} {'p90':>9s} {'min':>9s}")
    for label, s in rows:
        print(f"  {label:58s} {s['median_us']:8.1f}u {s['p90_us']:8.1f}u {s['min_us']:8.1f}u")
    verdict = "meets" if r["meets_goal"] else "MISSES"
    print(
        f"  ratio event one-way / pipe round trip/2: {r['ratio_event_to_pipe']:.2f}x; "
        f"/ pipe one-way after the same gap: {r['ratio_event_to_idle_pipe']:.2f}x"
    )
    median = r["event_one_way"]["median_us"]
    print(f"  event one-way median {median:.1f} us {verdict} the goal of <= {r['goal_us']:.0f} us")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a table, and return the results."""
    parser = argparse.ArgumentParser(description="cross-process IPC event signal latency under aclsim")
    parser.add_argument("--iters", type=int, default=2000, help="measured iterations (default 2000)")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured iterations first (default 100)")
    parser.add_argument("--gate-us", type=int, default=1000, help="device delay before each record (default 1000)")
    parser.add_argument("--cross-device", action="store_true", help="process B on device 1 instead of device 0")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or args.gate_us < 0:
        parser.error("--iters must be >= 1, --warmup and --gate-us >= 0")
    _activate()
    results = _measure(args.iters, args.warmup, args.gate_us, 1 if args.cross_device else 0)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print(results)
    return results


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        _activate()
        sys.exit(_child(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
    main()
