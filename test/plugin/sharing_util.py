"""Helpers for the tensor-sharing tests: spawned workers that report their tracebacks, counters, shm files.

A scenario is a few worker functions run in spawned processes. Each worker
runs under :func:`_worker`, which sends ``(name, None)`` or ``(name,
traceback)`` to a shared result queue, so a failing assertion in a child
shows up in the test's failure message instead of a bare exit code.
"""

from __future__ import annotations

import faulthandler
import os
import queue
import time
import traceback
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

import torch.multiprocessing as mp

import torch_npu_ipc

TIMEOUT = 120.0
CTX = mp.get_context("spawn")


def _worker(fn: Callable[..., Any], results: Any, name: str, args: tuple[Any, ...]) -> None:
    # A hung worker prints every thread's Python stack before the test gives up on it.
    faulthandler.dump_traceback_later(TIMEOUT - 10, exit=False)
    try:
        fn(*args)
    except BaseException:
        results.put((name, traceback.format_exc()))
        raise SystemExit(1) from None
    results.put((name, None))


class Scenario:
    """Spawned workers sharing one result queue; :meth:`finish` fails with the first child traceback."""

    def __init__(self) -> None:
        self.results = CTX.Queue()
        self.procs: dict[str, BaseProcess] = {}
        self.nested: set[str] = set()

    def also_expect(self, name: str) -> None:
        """Wait for a report from ``name`` too: a worker that another worker starts with :func:`spawn_reporting`."""
        self.nested.add(name)

    def queue(self) -> Any:
        """A torch.multiprocessing queue of the spawn context."""
        return CTX.Queue()

    def start(self, name: str, fn: Callable[..., Any], *args: Any, daemon: bool = False) -> BaseProcess:
        """Run ``fn(*args)`` in a spawned process called ``name`` (not a daemon: it may start children)."""
        p = CTX.Process(target=_worker, args=(fn, self.results, name, args), name=name, daemon=daemon)
        p.start()
        self.procs[name] = p
        return p

    def finish(self, timeout: float = TIMEOUT, expect: dict[str, int] | None = None) -> None:
        """Wait for every worker; fail on a traceback, a non-zero exit code (unless expected) or a timeout."""
        expect = expect or {}
        deadline = time.monotonic() + timeout
        reports: dict[str, str | None] = {}
        waiting = {n for n in self.procs if n not in expect} | self.nested
        try:
            while waiting - reports.keys():
                try:
                    name, tb = self.results.get(timeout=0.5)
                    reports[name] = tb
                    assert tb is None, f"worker {name} failed:\n{tb}"
                    continue
                except queue.Empty:
                    pass
                dead = [n for n in waiting - reports.keys() if n in self.procs and self.procs[n].exitcode is not None]
                if dead:  # exited without a report: give its report a moment to arrive
                    time.sleep(0.5)
                    while True:
                        try:
                            name, tb = self.results.get_nowait()
                        except queue.Empty:
                            break
                        reports[name] = tb
                        assert tb is None, f"worker {name} failed:\n{tb}"
                    lost = [n for n in dead if n not in reports]
                    assert not lost, f"worker(s) died without a report: {[(n, self.procs[n].exitcode) for n in lost]}"
                assert time.monotonic() < deadline, f"workers {sorted(waiting - reports.keys())} timed out"
            for name, p in self.procs.items():
                p.join(max(1.0, deadline - time.monotonic()))
                assert not p.is_alive(), f"worker {name} did not exit"
                assert p.exitcode == expect.get(name, 0), f"worker {name}: exit code {p.exitcode}"
        finally:
            self.kill()

    def kill(self) -> None:
        """Kill every worker still alive (clean-up after a failure)."""
        for p in self.procs.values():
            if p.is_alive():
                p.kill()
                p.join(5)


def spawn_reporting(results: Any, name: str, fn: Callable[..., Any], *args: Any, daemon: bool = False) -> BaseProcess:
    """From inside a worker: start ``fn(*args)`` reporting to the scenario's ``results`` queue as ``name``."""
    p = CTX.Process(target=_worker, args=(fn, results, name, args), name=name, daemon=daemon)
    p.start()
    return p


def get(q: Any, timeout: float = TIMEOUT) -> Any:
    """``q.get`` with the suite's timeout."""
    return q.get(timeout=timeout)


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Non-zero counter differences."""
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def shm_tables(pid: int | None = None) -> list[str]:
    """Names of torch_npu_ipc reference tables in /dev/shm (of ``pid`` when given)."""
    names = [n for n in os.listdir("/dev/shm") if n.startswith("torch_npu_ipc.")]
    if pid is not None:
        names = [n for n in names if n.split(".")[2] == str(pid)]
    return names


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def settle(timeout: float = 60.0) -> dict[str, Any]:
    """Collect until nothing this process sent is held and its limbo list is empty (or ``timeout`` passed).

    Returns:
        The final ``sharing_stats()``: the caller asserts on them, so a timeout shows what was left.
    """
    deadline = time.monotonic() + timeout
    while True:
        torch_npu_ipc.ipc_collect()
        st = torch_npu_ipc.sharing_stats()
        if (st["live_slots"] == 0 and st["limbo_blocks"] == 0) or time.monotonic() > deadline:
            return st
        time.sleep(0.05)
