"""Generated programs that pass NPU tensors around three processes keep every value (issue 4).

Each example is a program of actions by three spawned processes over tensors
they make, write, send to one another and drop:

- **make**: a tensor of 1, 1,000 or 300,000 elements on npu:0 or npu:1,
  written behind device work on one of three streams;
- **write**: its holder (the process that may write it: its maker, until it
  sends it) adds to it behind device work on one of three streams, reading
  it first or not;
- **send**: the holder sends it to one of the two other processes, through a
  ``torch.multiprocessing`` queue or as ``export_tensor`` bytes, right after
  the writes (no host synchronize), keeping its own reference or dropping
  it; the tensor or a view of its second half; bytes are imported on the
  tensor's device or on the other one (mapped with peer access); the
  receiver becomes the holder (of that view). Tensors go back to their maker,
  and on to the third process: a process that did not make a tensor
  forwards it (the descriptor names the maker's block and takes a slot in
  the maker's table), again and again;
- **drop**: any process drops its reference (the holder's drop ends the
  tensor);
- **churn**: a process collects (``ipc_collect()``), then allocates and
  frees tensors of every size on each of the three streams of a device,
  filled with -7, which would land in any block freed too early;
- **collect**: ``ipc_collect()``.

The programs order their own work as the docs ask of a torch.cuda user:
``wait_stream`` onto the stream a send records on (the default stream for a
queue, whose feeder thread pickles), ``record_stream`` for a use on another
stream than the tensor's first. Nothing else synchronizes the processes'
device work: every read and the values each holder checks at the end must
match the sequential model. After the last program every process drops
everything, and their reference slots and limbo lists must empty.

The first process generates the programs (``derandomize``; ``--soak`` runs
ten times as many); the others follow the actions they are sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch_npu  # noqa: F401
from helpers import fuzz_settings
from hypothesis import example, given
from hypothesis import strategies as st
from plugin_util import requires_aclsim, streams_per_device, synchronize_devices
from program_group import Inbox, Leader, follow, next_message, others, run_group
from sharing_util import settle

import aclsim
import torch_npu_ipc

pytestmark = [requires_aclsim, pytest.mark.devices(2)]

SIZES = (1, 1000, 300_000)  # elements (float32): a small-pool and a large-pool block among them
WORK = 0.0005  # device time before a write, per unit of work
KINDS = ("make", "write", "write", "send", "send", "send", "drop", "churn", "collect")
PROCESSES = 3


@dataclass(frozen=True)
class Raw:
    """A generated step; :func:`plan` reads its numbers against the tensors alive at that point."""

    kind: str
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int


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
    dest: int = 0  # the process a send goes to
    recv_stream: int = 0
    recv_device: int = 0
    offset: int = 0  # where the holder's view of the tensor starts
    new_offset: int = 0  # where the view sent starts (the second half of the holder's, or all of it)


raws = st.lists(st.builds(Raw, st.sampled_from(KINDS), *[st.integers(0, 11)] * 6), min_size=4, max_size=20)


def plan(steps: list[Raw]) -> list[Action]:
    """The actions of ``steps``: each picks among the tensors alive then, and acts through their holder."""
    live: dict[int, list[int]] = {}  # tensor -> [holder, device, the holder's view's offset, size]
    out: list[Action] = []
    made = 0
    for r in steps:
        if r.kind == "make" or (not live and r.kind in ("write", "send", "drop")):
            live[made] = [r.a % PROCESSES, r.b % 2, 0, SIZES[r.e % 3]]
            out.append(Action(r.a % PROCESSES, "make", made, r.b % 2, r.c % 3, r.d % 3, SIZES[r.e % 3]))
            made += 1
        elif r.kind in ("churn", "collect"):
            out.append(Action(r.a % PROCESSES, r.kind, device=r.b % 2))
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
                dest = (holder + 1 + r.f % (PROCESSES - 1)) % PROCESSES
                out.append(Action(holder, "send", obj, device, r.b % 3, channel=channel, keep=r.d % 2 == 1, dest=dest,
                                  recv_stream=r.e % 3, recv_device=to, offset=offset, new_offset=sent))  # fmt: skip
                live[obj] = [dest, to, sent, size]
            else:  # drop
                out.append(Action(r.b % PROCESSES, "drop", obj))
                if r.b % PROCESSES == holder:
                    del live[obj]
    return out


def start_values(obj: int, size: int) -> torch.Tensor:
    return torch.arange(size, dtype=torch.float32) % 1000 + 10 * obj


class Actor:
    """One process's side: its references, the streams of their last use and first use, the model."""

    def __init__(self, me: int, inboxes: list[Any]) -> None:
        self.me, self.inboxes, self.inbox = me, inboxes, Inbox(inboxes[me])
        self.received = 0  # tensors received in the current program
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

    def take_turn(self, pid: int, expected: int) -> None:
        """Receive up to the message handing the turn over, and until ``expected`` tensors came in this program.

        A tensor sent to this process before its turn may come after that message: the sender's queue
        writes it from a thread of its own.
        """
        turn = False
        while not turn or self.received < expected:
            msg = next_message(self.inbox, pid)  # a queued tensor is rebuilt here, on the default streams
            if msg[0] == "turn":
                turn = True
                continue
            self.received += 1
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
        self.received = 0
        expected = 0  # tensors sent to this process by the actions so far
        for n, act in enumerate(actions):
            what = f"action {n} of {actions}"
            mine = act.actor == self.me
            if mine and n > 0 and actions[n - 1].actor != self.me:
                self.take_turn(pid, expected)
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
                holder[act.obj] = act.dest
                expected += act.dest == self.me
                if mine:
                    # A queue pickles in its feeder thread, on the default stream: order the writes onto it.
                    s = self.use_on(act.obj, act.device, act.stream if act.channel == "bytes" else 0)
                    t = self.refs[act.obj][act.new_offset - act.offset :]
                    with torch.npu.stream(s):
                        payload = t if act.channel == "queue" else torch_npu_ipc.export_tensor(t)
                    msg = ("data", pid, act.obj, act.channel, payload, act.recv_stream, act.recv_device, act.new_offset)
                    self.inboxes[act.dest].put(msg)
                    del t, payload, msg
                    if not act.keep:
                        self.drop(act.obj)
            elif act.kind == "drop":
                if mine:
                    self.drop(act.obj)
                if holder.get(act.obj) == act.actor:
                    del model[act.obj], holder[act.obj]
            elif mine and act.kind == "churn":
                torch_npu_ipc.ipc_collect()  # blocks whose receivers all let go return to the allocator
                for s in self.streams[act.device]:  # its blocks are reused per allocation stream
                    with torch.npu.stream(s):
                        garbage = [torch.full((size,), -7.0, device=s.device) for size in SIZES for _ in range(3)]
                    del garbage
            elif mine and act.kind == "collect":
                torch_npu_ipc.ipc_collect()
            if mine and n + 1 < len(actions) and actions[n + 1].actor != self.me:
                self.inboxes[actions[n + 1].actor].put(("turn", pid))
            elif mine and n + 1 == len(actions):
                for q in others(self.me, self.inboxes):
                    q.put(("turn", pid))  # after the last action: the others receive what is left
        if actions[-1].actor != self.me:
            self.take_turn(pid, expected)
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


# Made by process 0 and sent as bytes to process 1, which forwards it to process 2, both dropping their
# references; then process 0 collects and churns, and process 2 reads it. Only the slot the forward took in
# process 0's table keeps the block from the allocator (a forward whose slot named another block failed here).
FORWARD_TO_THIRD = [
    Raw("make", 0, 0, 0, 0, 1, 0),
    Raw("send", 0, 0, 1, 0, 0, 0),
    Raw("send", 0, 0, 1, 0, 0, 0),
    Raw("churn", 0, 0, 0, 0, 0, 0),
    Raw("write", 0, 0, 0, 5, 1, 0),
]


def _first(me: int, inboxes: list[Any], back: Any) -> None:
    """Generates the programs and plays its actions; at the end, every process settles."""
    actor = Actor(me, inboxes)
    leader = Leader(inboxes, back)

    @fuzz_settings(150)
    @given(raws)
    @example(FORWARD_TO_THIRD)
    def play(steps: list[Raw]) -> None:
        synchronize_devices()
        leader.play(plan(steps), actor.run)

    try:
        play()
    finally:
        theirs = leader.stop()
    for who, stats in enumerate([settle(30), *theirs]):
        assert stats["live_slots"] == 0 and stats["limbo_blocks"] == 0, f"process {who} after the last program: {stats}"


def _other(me: int, inboxes: list[Any], back: Any) -> None:
    """Plays its actions of every program it is sent, until stopped; then settles."""
    actor = Actor(me, inboxes)
    follow(actor.inbox, me, inboxes, back, actor.run, prepare=synchronize_devices, at_stop=lambda: settle(30))


def test_generated_sharing_programs_keep_every_value() -> None:
    """150 programs of 4 to 20 steps by three processes: make, write, send (any way), drop, churn, collect."""
    run_group(_first, _other, processes=PROCESSES, timeout=900)
