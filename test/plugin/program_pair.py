"""Two spawned processes playing generated programs in turns (the events and sharing program tests).

The first process generates each program (with hypothesis), sends it to the
second and plays its own part; the second plays its part of every program it
is sent. The parts exchange messages tagged with the program's number, so a
failed program's leftovers are dropped instead of confusing the next one, and
a failure on either side wakes the other (an ``error`` or ``abort`` message)
instead of leaving it waiting for a turn.
"""

from __future__ import annotations

import queue
import traceback
from collections.abc import Callable
from typing import Any

from sharing_util import Scenario

TIMEOUT = 60.0  # for any one message


def get_for(q: Any, pid: int) -> tuple[Any, ...]:
    """The next message of ``q`` about program ``pid`` (those of an earlier, failed program are dropped)."""
    while (msg := q.get(timeout=TIMEOUT))[1] != pid:
        pass
    return msg


def next_message(inbox: Any, pid: int) -> tuple[Any, ...]:
    """The other process's next message about program ``pid``; raises if it gave the program up."""
    msg = get_for(inbox, pid)
    if msg[0] in ("error", "abort"):
        raise AssertionError(f"the other process gave up program {pid}:\n{msg[2]}")
    return msg


class Leader:
    """The first process's end: hands each program to the second and collects its report."""

    def __init__(self, peer: Any, back: Any) -> None:
        self.peer, self.back, self.pid = peer, back, 0

    def play(self, program: Any, run: Callable[[int, Any], Any]) -> tuple[Any, Any]:
        """Run ``program`` on both sides (``run(pid, program)`` here); returns both sides' results.

        Raises:
            AssertionError: on a failure on either side (the second's traceback included).
        """
        self.pid += 1
        pid = self.pid
        self.peer.put(("program", pid, program))
        try:
            assert get_for(self.back, pid)[0] == "ready"
            mine = run(pid, program)
            report = get_for(self.back, pid)
        except BaseException:
            self.peer.put(("abort", pid, traceback.format_exc()))
            raise
        assert report[0] == "done", f"the second process failed {program}:\n{report[2]}"
        return mine, report[2]

    def stop(self) -> Any:
        """Tell the second process to stop; returns what its ``at_stop`` returned."""
        self.peer.put(("stop", 0))
        return get_for(self.back, 0)[2]


def follow(
    inbox: Any,
    peer: Any,
    back: Any,
    run: Callable[[int, Any], Any],
    *,
    prepare: Callable[[], None],
    at_stop: Callable[[], Any] = lambda: None,
) -> None:
    """The second process's loop: ``prepare()`` then ``run(pid, program)`` for every program, until stopped."""
    while True:
        try:
            msg = inbox.get(timeout=600)
        except queue.Empty:
            raise AssertionError("no program for 600 s") from None
        if msg[0] == "stop":
            back.put(("stopped", 0, at_stop()))
            return
        if msg[0] != "program":
            continue  # a message of a program that failed
        _, pid, program = msg
        prepare()
        back.put(("ready", pid))
        try:
            result = run(pid, program)
        except BaseException:
            tb = traceback.format_exc()
            peer.put(("error", pid, tb))  # wakes the first process if it waits for a turn
            back.put(("error", pid, tb))
            continue
        back.put(("done", pid, result))


def run_pair(first: Callable[..., None], second: Callable[..., None], timeout: float) -> None:
    """Start ``first(inbox, peer, back)`` and ``second(inbox, peer, back)``; fail on either's traceback."""
    s = Scenario()
    to_first, to_second, back = s.queue(), s.queue(), s.queue()
    s.start("second", second, to_second, to_first, back)
    s.start("first", first, to_first, to_second, back)
    s.finish(timeout=timeout)
