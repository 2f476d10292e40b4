"""Spawned processes playing generated programs together (the events and sharing program tests).

The first process generates each program (with hypothesis), sends it to the
others and plays its own part; each other process plays its part of every
program it is sent. Each process has one inbox; the parts exchange messages
tagged with the program's number, so a failed program's leftovers are
dropped instead of confusing the next one, and a failure in any process
wakes the others (an ``error`` or ``abort`` message) instead of leaving them
waiting for a turn.
"""

from __future__ import annotations

import queue
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from sharing_util import Scenario

TIMEOUT = 60.0  # for any one message


class Inbox:
    """A process's own queue, read by program: messages of earlier programs are dropped, of later ones kept.

    A process may be sent messages of a program before it read that program: another process that
    got the program first may already play its part.
    """

    def __init__(self, q: Any) -> None:
        self.q = q
        self.early: list[tuple[Any, ...]] = []

    def get_for(self, pid: int) -> tuple[Any, ...]:
        """The next message about program ``pid``."""
        return self._next(lambda m: m[1] == pid, pid)

    def next_program(self, last: int) -> tuple[Any, ...]:
        """The next ``program`` (numbered above ``last``) or ``stop`` message."""
        return self._next(lambda m: m[0] == "stop" or (m[0] == "program" and m[1] > last), last, timeout=600)

    def _next(self, wanted: Callable[[tuple[Any, ...]], bool], pid: int, timeout: float = TIMEOUT) -> tuple[Any, ...]:
        for i, msg in enumerate(self.early):
            if wanted(msg):
                return self.early.pop(i)
        while True:
            try:
                msg = self.q.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no message for {timeout} s, waiting in program {pid}") from None
            if wanted(msg):
                self.early = [m for m in self.early if m[1] > pid]
                return msg
            if msg[1] > pid:
                self.early.append(msg)


def get_for(q: Any, pid: int) -> tuple[Any, ...]:
    """The next message of ``q`` about program ``pid`` (those of an earlier, failed program are dropped)."""
    while (msg := q.get(timeout=TIMEOUT))[1] != pid:
        pass
    return msg


def next_message(inbox: Inbox, pid: int) -> tuple[Any, ...]:
    """Another process's next message about program ``pid``; raises if one gave the program up."""
    msg = inbox.get_for(pid)
    if msg[0] in ("error", "abort"):
        raise AssertionError(f"another process gave up program {pid}:\n{msg[2]}")
    return msg


def others(me: int, inboxes: Sequence[Any]) -> list[Any]:
    """Every inbox but process ``me``'s."""
    return [q for k, q in enumerate(inboxes) if k != me]


class Leader:
    """The first process's end: hands each program to the others and collects their reports."""

    def __init__(self, inboxes: Sequence[Any], back: Any) -> None:
        self.peers, self.back, self.pid = others(0, inboxes), back, 0

    def play(self, program: Any, run: Callable[[int, Any], Any]) -> tuple[Any, list[Any]]:
        """Run ``program`` in every process (``run(pid, program)`` here); returns this one's result and the others'.

        Raises:
            AssertionError: on a failure in any process (the others' tracebacks included).
        """
        self.pid += 1
        pid = self.pid
        for q in self.peers:
            q.put(("program", pid, program))
        try:
            reports, ready = [], 0
            while ready < len(self.peers):  # a process may finish its part before another is ready
                msg = get_for(self.back, pid)
                if msg[0] == "ready":
                    ready += 1
                else:
                    reports.append(msg)
            mine = run(pid, program)
            while len(reports) < len(self.peers):
                reports.append(get_for(self.back, pid))
            reports.sort(key=lambda r: r[2])
        except BaseException:
            for q in self.peers:
                q.put(("abort", pid, traceback.format_exc()))
            raise
        failed = [r[3] for r in reports if r[0] != "done"]
        assert not failed, f"another process failed {program}:\n" + "\n".join(failed)
        return mine, [r[3] for r in reports]

    def stop(self) -> list[Any]:
        """Tell the others to stop; returns what their ``at_stop`` returned, in process order."""
        for q in self.peers:
            q.put(("stop", 0))
        return [r[3] for r in sorted((get_for(self.back, 0) for _ in self.peers), key=lambda r: r[2])]


def follow(
    inbox: Inbox,
    me: int,
    inboxes: Sequence[Any],
    back: Any,
    run: Callable[[int, Any], Any],
    *,
    prepare: Callable[[], None],
    at_stop: Callable[[], Any] = lambda: None,
) -> None:
    """Process ``me``'s loop: ``prepare()`` then ``run(pid, program)`` for every program, until stopped.

    ``inbox`` wraps ``inboxes[me]``; ``run`` reads it too.
    """
    pid = 0
    while True:
        msg = inbox.next_program(pid)
        if msg[0] == "stop":
            back.put(("stopped", 0, me, at_stop()))
            return
        _, pid, program = msg
        prepare()
        back.put(("ready", pid, me))
        try:
            result = run(pid, program)
        except BaseException:
            tb = traceback.format_exc()
            for q in others(me, inboxes):
                q.put(("error", pid, tb))  # wakes a process waiting for a turn
            back.put(("error", pid, me, tb))
            continue
        back.put(("done", pid, me, result))


def run_group(first: Callable[..., None], other: Callable[..., None], processes: int, timeout: float) -> None:
    """Start ``first(0, inboxes, back)`` and ``other(k, inboxes, back)`` for k >= 1; fail on any traceback."""
    s = Scenario()
    inboxes, back = [s.queue() for _ in range(processes)], s.queue()
    for k in range(1, processes):
        s.start(f"process {k}", other, k, inboxes, back)
    s.start("process 0", first, 0, inboxes, back)
    s.finish(timeout=timeout)
