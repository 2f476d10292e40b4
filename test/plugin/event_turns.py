"""Turns over one shared tensor, passed between two processes by interprocess events.

A turn belongs to one process, one of two devices and one of three streams
of that device. It makes its stream wait on the event the turn before
recorded (received as an ``Event`` object through a queue, as
``ipc_handle()`` bytes, or as ``reduce_event``'s tuple), may read the
tensor, adds to it behind device work (on npu:1 through a copy there and
back) and records an event: the process's own, the one it received, or a
fresh one dropped once passed on. Played by the generated programs of
``test_events_programs_fuzz.py`` and by the threads of
``test_events_threads.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from plugin_util import streams_per_device
from program_group import Inbox, next_message

import aclsim
from torch_npu_ipc import Event, reductions

N = 256
WORK = 0.0005  # device time before a turn's add, per unit of Turn.work


@dataclass(frozen=True)
class Turn:
    """One process's step: wait, maybe read, add behind work, record, pass on."""

    actor: int
    device: int
    stream: int
    work: int
    add: int
    read: bool
    record: str  # "own", "received" (falls back to "own" on another device) or "fresh"
    channel: str  # how the event reaches the other process: "object", "handle" or "reduce"


class Actor:
    """One process's side of the programs: its streams, its events, its copy of ``T``'s handle."""

    def __init__(self, me: int, t: torch.Tensor, inbox: Inbox, peer: Any) -> None:
        self.me, self.t, self.inbox, self.peer = me, t, inbox, peer
        self.local = torch.zeros(N, device="npu:1")  # T's stand-in for turns on npu:1 (and npu:1 initialized)
        # The zeros run on npu:1's default stream, which no turn's stream waits for: left queued, they could
        # land after a first turn's copy into local (test_events_threads.py makes an Actor right before playing).
        torch.npu.synchronize(1)
        self.streams = streams_per_device()

    def receive(self, pid: int, device: int) -> Event:
        """The event of the other process's turn of program ``pid``, opened for a turn on ``device``."""
        _, _, channel, payload = next_message(self.inbox, pid)
        if channel == "handle":
            return Event.from_ipc_handle(torch.device("npu", device), payload)
        if channel == "reduce":
            fn, args = payload
            return fn(*args)
        return payload

    def send(self, pid: int, channel: str, event: Event) -> None:
        if channel == "handle":
            payload: Any = event.ipc_handle()
        elif channel == "reduce":
            payload = reductions.reduce_event(event)
        else:
            payload = event
        self.peer.put(("token", pid, channel, payload))

    def run(self, pid: int, program: list[Turn]) -> list[float] | None:
        """Play this process's turns of ``program``; returns what T finally holds above its start values
        (one value each, if the turns went in sequence) if it played the last turn."""
        own: dict[int, Event] = {}
        event: Event | None = None  # recorded by the turn before
        total = 0
        for n, turn in enumerate(program):
            if turn.actor != self.me:
                total += turn.add
                continue
            if n > 0 and program[n - 1].actor != self.me:
                event = self.receive(pid, turn.device)
            s = self.streams[turn.device][turn.stream]
            with torch.npu.device(turn.device), torch.npu.stream(s):
                if event is not None:
                    event.wait(s)
                target = self.t if turn.device == 0 else self.local
                if turn.device == 1:
                    self.local.copy_(self.t)  # npu:0 -> npu:1, after s (the barrier)
                if turn.read:
                    got = target.cpu()
                    want = torch.arange(N, dtype=torch.float32) + total
                    assert torch.equal(got, want), f"turn {n} of {program}: read {got[:4]}, expected {want[:4]}"
                if turn.work:
                    aclsim.sleep(s.npu_stream, WORK * turn.work)
                target.add_(turn.add)
                if turn.device == 1:
                    self.t.copy_(self.local)  # npu:1 -> npu:0, on s
                total += turn.add
                if turn.record == "fresh":
                    recorded = Event(interprocess=True)
                elif turn.record == "received" and event is not None and event.device.index == turn.device:
                    recorded = event
                else:
                    if turn.device not in own:
                        own[turn.device] = Event(interprocess=True)
                    recorded = own[turn.device]
                recorded.record(s)
            event = recorded
            del recorded
            if n + 1 < len(program) and program[n + 1].actor != self.me:
                self.send(pid, turn.channel, event)
                event = None  # a fresh event dies here, while the other process may not have opened it yet
        if program[-1].actor != self.me:
            return None
        assert event is not None
        event.synchronize()
        return (self.t.cpu() - torch.arange(N, dtype=torch.float32)).unique().tolist()
