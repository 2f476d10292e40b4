"""Generated programs that pass NPU tensors back and forth between two processes keep every value (issue 4).

Each example is a program of actions by two spawned processes over tensors
they make, write, send to each other and drop:

- **make**: a tensor of 1, 1,000 or 300,000 elements on npu:0 or npu:1,
  written behind device work on one of three streams;
- **write**: its holder (the process that may write it: its maker, until it
  sends it) adds to it behind device work on one of three streams, reading
  it first or not;
- **send**: the holder sends it to the other process, through a
  ``torch.multiprocessing`` queue or as ``export_tensor`` bytes, right after
  the writes (no host synchronize), keeping its own reference or dropping
  it; the tensor or a view of its second half; bytes are imported on the
  tensor's device or on the other one (mapped with peer access); the other
  process becomes the holder (of that view). Tensors go back to their maker
  too, and again and again;
- **drop**: either process drops its reference (the holder's drop ends the
  tensor);
- **churn**: a process allocates and frees tensors of every size on a
  device, filled with -7, which would land in any block freed too early;
- **collect**: ``ipc_collect()``.

The programs order their own work as the docs ask of a torch.cuda user:
``wait_stream`` onto the stream a send records on (the default stream for a
queue, whose feeder thread pickles), ``record_stream`` for a use on another
stream than the tensor's first. Nothing else synchronizes the two processes'
device work: every read and the values each holder checks at the end must
match the sequential model. After the last program both processes drop
everything, and their reference slots and limbo lists must empty.

The first process generates the programs (``derandomize``; ``--soak`` runs
ten times as many); the second follows the actions it is sent.
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
from plugin_util import requires_aclsim, streams_per_device, synchronize_devices
from program_pair import Leader, follow, next_message, run_pair
from sharing_util import settle

import aclsim
import torch_npu_ipc

pytestmark = [requires_aclsim, pytest.mark.devices(2)]

SIZES = (1, 1000, 300_000)  # elements (float32): a small-pool and a large-pool block among them
WORK = 0.0005  # device time before a write, per unit of work
KINDS = ("make", "write", "write", "send", "send", "send", "drop", "churn", "collect")


@dataclass(frozen=True)
class Raw:
    """A generated step; :func:`plan` reads its numbers against the tensors alive at that point."""

    kind: str
    a: int
    b: int
    c: int
    d: int
    e: int


@dataclass(frozen=True)
class Action:
    """One process's concrete step (see the module docstring)."""

    actor: int
    kind: str
    obj: int = -1
    device: int = 0
    stream: int = 0
    work: int = 0
    size: int = 1
    add: int = 0
    read: bool = False
    channel: str = "queue"
    keep: bool = False
    recv_stream: int = 0
    recv_device: int = 0
    offset: int = 0  # where the holder's view of the tensor starts
    new_offset: int = 0  # where the view sent starts (the second half of the holder's, or all of it)


raws = st.lists(st.builds(Raw, st.sampled_from(KINDS), *[st.integers(0, 11)] * 5), min_size=4, max_size=20)


def plan(steps: list[Raw]) -> list[Action]:
    """The actions of ``steps``: each picks among the tensors alive then, and acts through their holder."""
    live: dict[int, list[int]] = {}  # tensor -> [holder, device, the holder's view's offset, size]
    out: list[Action] = []
    made = 0
    for r in steps:
        if r.kind == "make" or (not live and r.kind in ("write", "send", "drop")):
            live[made] = [r.a % 2, r.b % 2, 0, SIZES[r.e % 3]]
            out.append(Action(r.a % 2, "make", made, r.b % 2, r.c % 3, r.d % 3, SIZES[r.e % 3]))
            made += 1
        elif r.kind in ("churn", "collect"):
            out.append(Action(r.a % 2, r.kind, device=r.b % 2))
        else:
            obj = sorted(live)[r.a % len(live)]
            holder, device, offset, size = live[obj]
            if r.kind == "write":
                out.append(Action(holder, "write", obj, device, r.b % 3, r.c % 3, add=r.d % 11 - 5, read=r.e % 2 == 1,
                                  offset=offset))  # fmt: skip
            elif r.kind == "send":
                channel = ("queue", "bytes")[r.c % 2]
                # Bytes may be imported on the other device (mapped with peer access); a queue keeps the device.
                to = 1 - device if channel == "bytes" and r.e // 3 % 2 == 1 else device
                sent = offset + (size - offset) // 2 if r.c // 2 % 2 == 1 else offset  # a view of the second half
                out.append(Action(holder, "send", obj, device, r.b % 3, channel=channel, keep=r.d % 2 == 1,
                                  recv_stream=r.e % 3, recv_device=to, offset=offset, new_offset=sent))  # fmt: skip
                live[obj] = [1 - holder, to, sent, size]
            else:  # drop
                out.append(Action(r.b % 2, "drop", obj))
                if r.b % 2 == holder:
                    del live[obj]
    return out


def start_values(obj: int, size: int) -> torch.Tensor:
    return torch.arange(size, dtype=torch.float32) % 1000 + 10 * obj


class Actor:
    """One process's side: its references, the streams of their last use and first use, the model."""

    def __init__(self, me: int, inbox: Any, peer: Any) -> None:
        self.me, self.inbox, self.peer = me, inbox, peer
        for d in range(2):
            torch.zeros(1, device=f"npu:{d}")
        self.streams = streams_per_device()
        self.refs: dict[int, torch.Tensor] = {}
        self.first: dict[int, int] = {}  # stream of the allocation or the receive
        self.last: dict[int, int] = {}  # stream of the last use, while this process holds the tensor
        self.offset: dict[int, int] = {}  # where this process's view of the tensor starts

    def use_on(self, obj: int, device: int, k: int) -> torch.npu.Stream:
        """Order a use of ``obj`` on stream ``k`` after its last use, as a correct program does."""
        s = self.streams[device][k]
        if k != self.last[obj]:
            s.wait_stream(self.streams[device][self.last[obj]])
        if k != self.first[obj]:
            self.refs[obj].record_stream(s)
        self.last[obj] = k
        return s

    def take_turn(self, pid: int) -> None:
        """Receive what the other process sent during its turn, up to the message handing the turn over."""
        while True:
            msg = next_message(self.inbox, pid)  # a queued tensor is rebuilt here, on the default streams
            if msg[0] == "turn":
                return
            _, _, obj, channel, payload, recv_stream, device, offset = msg
            self.offset[obj] = offset
            if channel == "bytes":
                with torch.npu.stream(self.streams[device][recv_stream]):
                    payload = torch_npu_ipc.import_tensor(payload, device)
                assert payload.device.index == device
            else:
                recv_stream = 0
            self.refs[obj], self.first[obj], self.last[obj] = payload, recv_stream, recv_stream

    def run(self, pid: int, actions: list[Action]) -> None:
        """Play this process's actions of the program; check the tensors it holds at the end; drop all."""
        try:
            self._play(pid, actions)
        finally:
            for obj in list(self.refs):
                self.drop(obj)

    def _play(self, pid: int, actions: list[Action]) -> None:
        model: dict[int, torch.Tensor] = {}
        holder: dict[int, int] = {}
        for n, act in enumerate(actions):
            what = f"action {n} of {actions}"
            mine = act.actor == self.me
            if mine and n > 0 and actions[n - 1].actor != self.me:
                self.take_turn(pid)
            if act.kind == "make":
                model[act.obj], holder[act.obj] = start_values(act.obj, act.size), act.actor
                if mine:
                    s = self.streams[act.device][act.stream]
                    with torch.npu.stream(s):
                        t = torch.zeros(act.size, device=f"npu:{act.device}")
                        values = model[act.obj].to(t.device)
                        if act.work:
                            aclsim.sleep(s.npu_stream, WORK * act.work)
                        t.add_(values)
                    self.refs[act.obj], self.first[act.obj], self.last[act.obj] = t, act.stream, act.stream
                    self.offset[act.obj] = 0
            elif act.kind == "write":
                if mine:
                    s = self.use_on(act.obj, act.device, act.stream)
                    with torch.npu.stream(s):
                        if act.read:
                            got = self.refs[act.obj].cpu()
                            assert torch.equal(got, model[act.obj][act.offset :]), f"{what}: read {got[:4]}"
                        if act.work:
                            aclsim.sleep(s.npu_stream, WORK * act.work)
                        self.refs[act.obj].add_(act.add)
                model[act.obj][act.offset :] += act.add
            elif act.kind == "send":
                holder[act.obj] = 1 - act.actor
                if mine:
                    # A queue pickles in its feeder thread, on the default stream: order the writes onto it.
                    s = self.use_on(act.obj, act.device, act.stream if act.channel == "bytes" else 0)
                    t = self.refs[act.obj][act.new_offset - act.offset :]
                    with torch.npu.stream(s):
                        payload = t if act.channel == "queue" else torch_npu_ipc.export_tensor(t)
                    self.peer.put(("data", pid, act.obj, act.channel, payload, act.recv_stream, act.recv_device,
                                   act.new_offset))  # fmt: skip
                    del t, payload
                    if not act.keep:
                        self.drop(act.obj)
            elif act.kind == "drop":
                if mine:
                    self.drop(act.obj)
                if holder.get(act.obj) == act.actor:
                    del model[act.obj], holder[act.obj]
            elif mine and act.kind == "churn":
                garbage = [torch.full((size,), -7.0, device=f"npu:{act.device}") for size in SIZES for _ in range(3)]
                del garbage
            elif mine and act.kind == "collect":
                torch_npu_ipc.ipc_collect()
            if mine and (n + 1 == len(actions) or actions[n + 1].actor != self.me):
                self.peer.put(("turn", pid))  # after the last action too: the other process receives what is left
        if actions[-1].actor != self.me:
            self.take_turn(pid)
        for obj, who in holder.items():
            if who == self.me:
                device = self.refs[obj].device.index
                with torch.npu.stream(self.use_on(obj, device, self.last[obj])):
                    got = self.refs[obj].cpu()
                want = model[obj][self.offset[obj] :]
                assert torch.equal(got, want), f"end of {actions}: tensor {obj} holds {got[:4]}"

    def drop(self, obj: int) -> None:
        self.refs.pop(obj, None)
        self.first.pop(obj, None)
        self.last.pop(obj, None)
        self.offset.pop(obj, None)


def _first(inbox: Any, peer: Any, back: Any) -> None:
    """Generates the programs and plays its actions; at the end, both settle."""
    actor = Actor(0, inbox, peer)
    leader = Leader(peer, back)

    @fuzz_settings(150)
    @given(raws)
    def play(steps: list[Raw]) -> None:
        synchronize_devices()
        leader.play(plan(steps), actor.run)

    try:
        play()
    finally:
        other = leader.stop()
    mine = settle(30)
    for who, stats in (("first", mine), ("second", other)):
        assert stats["live_slots"] == 0 and stats["limbo_blocks"] == 0, f"{who} process after the last program: {stats}"


def _second(inbox: Any, peer: Any, back: Any) -> None:
    """Plays its actions of every program it is sent, until stopped; then settles."""
    actor = Actor(1, inbox, peer)
    follow(inbox, peer, back, actor.run, prepare=synchronize_devices, at_stop=lambda: settle(30))


def test_generated_sharing_programs_keep_every_value() -> None:
    """150 programs of 4 to 20 steps: make, write, send (both ways, both transports), drop, churn, collect."""
    run_pair(_first, _second, timeout=900)
