"""Generated programs passing turns between two processes by interprocess events run as one sequence would.

Each example is a program of turns over one tensor ``T`` on npu:0, shared
once between two spawned processes. A turn belongs to one process, one of
two devices and one of three streams of that device. It:

1. makes its stream wait on the event the turn before recorded, received as
   an ``Event`` object through a queue, as ``ipc_handle()`` bytes opened on
   the turn's device, or as ``reduce_event``'s tuple (kept as is when the
   same process has the next turn too);
2. may read ``T`` and compare it with the sum of the adds so far;
3. adds to ``T`` behind device work (on npu:1 through a copy of ``T`` there
   and back, which the copy barrier orders with the turn's stream);
4. records an event: the process's own for that device, the one it just
   received, or a fresh one it drops as soon as it is passed on.

Nothing but the events orders the turns: a wait that bound to an older
record, a record still in torch_npu's task queue when its handle left, or an
event destroyed before the other process opened it makes a read or the
final value differ from the sequential sum. The first process runs the
generated examples (``derandomize``; ``--soak`` runs ten times as many);
the second follows the program it is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch_npu  # noqa: F401
from helpers import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from plugin_util import open_native, requires_aclsim, share_native, streams_per_device, synchronize_devices
from program_pair import TIMEOUT, Leader, follow, next_message, run_pair

import aclsim
import torch_npu_ipc  # noqa: F401
from torch_npu_ipc import Event, reductions

pytestmark = [requires_aclsim, pytest.mark.devices(2)]

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


turns = st.builds(
    Turn,
    st.integers(0, 1),
    st.integers(0, 1),
    st.integers(0, 2),
    st.integers(0, 2),
    st.integers(-5, 5),
    st.booleans(),
    st.sampled_from(["own", "received", "fresh"]),
    st.sampled_from(["object", "handle", "reduce"]),
)
programs = st.lists(turns, min_size=1, max_size=12)


class Actor:
    """One process's side of the programs: its streams, its events, its copy of ``T``'s handle."""

    def __init__(self, me: int, t: torch.Tensor, inbox: Any, peer: Any) -> None:
        self.me, self.t, self.inbox, self.peer = me, t, inbox, peer
        self.local = torch.zeros(N, device="npu:1")  # T's stand-in for turns on npu:1 (and npu:1 initialized)
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


def _first(inbox: Any, peer: Any, back: Any) -> None:
    """npu:0's T, shared with the second process; generates the programs and plays its turns."""
    t = torch.arange(N, dtype=torch.float32, device="npu:0")
    peer.put(share_native(t))
    actor = Actor(0, t, inbox, peer)
    leader = Leader(peer, back)

    @fuzz_settings(60)
    @given(programs)
    def play(program: list[Turn]) -> None:
        synchronize_devices()
        t.copy_(torch.arange(N, dtype=torch.float32, device="npu:0"))
        synchronize_devices()
        mine, theirs = leader.play(program, actor.run)
        final = theirs if mine is None else mine
        want = [float(sum(turn.add for turn in program))]
        assert final == want, f"{program}: T holds {final} above its start values at the end, expected {want}"

    try:
        play()
    finally:
        leader.stop()


def _second(inbox: Any, peer: Any, back: Any) -> None:
    """Plays its turns of every program it is sent, until stopped."""
    t = open_native(inbox.get(timeout=TIMEOUT))
    actor = Actor(1, t, inbox, peer)
    follow(inbox, peer, back, actor.run, prepare=synchronize_devices)  # a failed program's work runs out first


def test_generated_event_programs_match_the_sequence() -> None:
    """60 programs of up to 12 turns between two processes, ordered by interprocess events only."""
    run_pair(_first, _second, timeout=600)
