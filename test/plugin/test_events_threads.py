"""Interprocess events passed by several threads of two processes at once keep each thread pair's order (issue 2).

Two spawned processes each run three threads; thread ``j`` of one process
and thread ``j`` of the other pass turns over their own shared tensor
``T_j`` (the turns of ``event_turns.py``: wait on the event received, maybe
read, add behind device work, on npu:0 or through a copy to npu:1 and
back, record the process's own event, the one received or a fresh one
dropped at once, and pass it on as an ``Event``, its handle or
``reduce_event``'s tuple). Each process also runs a thread of
cross-device copies, which take events from the same per-device pools.

Nothing orders the pairs with each other: their threads create, open,
record, pass and drop events at the same time, in the event manager, its
pools and its deferred destruction. Every read, and each tensor's final
value, must equal the sum of its own pair's adds. The programs come from
fixed seeds (60 turns per pair; ``--soak``: 600).
"""

from __future__ import annotations

import random
import threading
import traceback
from typing import Any

import pytest
import torch
from event_turns import Actor, N, Turn
from helpers import run_threads, soak
from plugin_util import open_native, requires_aclsim, share_native, synchronize_devices
from program_group import Inbox
from sharing_util import Scenario, get

import torch_npu_ipc  # noqa: F401

pytestmark = [requires_aclsim, pytest.mark.devices(2)]

PAIRS = 3


def program(pair: int, length: int) -> list[Turn]:
    """Pair ``pair``'s turns, the same in both processes (a fixed seed per pair)."""
    rng = random.Random(4000 + pair)
    return [
        Turn(
            actor=rng.randrange(2),
            device=rng.randrange(2),
            stream=rng.randrange(3),
            work=rng.randrange(3),
            add=rng.randint(-5, 5),
            read=rng.random() < 0.5,
            record=rng.choice(("own", "received", "fresh")),
            channel=rng.choice(("object", "handle", "reduce")),
        )
        for _ in range(length)
    ]


def _play(me: int, pair: int, t: torch.Tensor, inbox: Any, peer: Any, *, length: int) -> None:
    turns = program(pair, length)
    try:
        final = Actor(me, t, Inbox(inbox), peer).run(1, turns)
    except BaseException:
        peer.put(("error", 1, traceback.format_exc()))  # wakes the other thread of the pair
        raise
    if final is not None:  # this process played the last turn
        want = [float(sum(turn.add for turn in turns))]
        assert final == want, f"pair {pair}: T holds {final} above its start values at the end, expected {want}"


def _copies(stop: threading.Event) -> None:
    """Cross-device copies in both directions until ``stop``, each checked."""
    rng = random.Random(5000)
    streams = [torch.npu.Stream(device=d) for d in range(2)]
    while not stop.is_set():
        src = rng.randrange(2)
        want = torch.arange(rng.choice((1, 1000, 65536)), dtype=torch.float32) + rng.randrange(100)
        with torch.npu.stream(streams[src]), torch.npu.stream(streams[1 - src]):
            got = want.to(f"npu:{src}").to(f"npu:{1 - src}").cpu()
        assert torch.equal(got, want), f"copy from npu:{src}: {got[:4]}, want {want[:4]}"


def _side(me: int, inboxes: list[Any], peers: list[Any], setup: Any, length: int) -> None:
    synchronize_devices()
    if me == 0:
        ts = [torch.arange(N, dtype=torch.float32, device="npu:0") for _ in range(PAIRS)]
        torch.npu.synchronize(0)
        setup.put([share_native(t) for t in ts])
    else:
        ts = [open_native(shared) for shared in get(setup)]
    stop = threading.Event()

    def pairs() -> None:
        try:
            run_threads([lambda j=j: _play(me, j, ts[j], inboxes[j], peers[j], length=length) for j in range(PAIRS)])
        finally:
            stop.set()

    run_threads([pairs, lambda: _copies(stop)])


def test_threads_pass_events_between_processes() -> None:
    """Three thread pairs pass turns by interprocess events at once, beside a thread of cross-device copies."""
    length = 600 if soak() else 60
    s = Scenario()
    to_first, to_second = [s.queue() for _ in range(PAIRS)], [s.queue() for _ in range(PAIRS)]
    setup = s.queue()
    s.start("second", _side, 1, to_second, to_first, setup, length)
    s.start("first", _side, 0, to_first, to_second, setup, length)
    s.finish(timeout=900 if soak() else 180)
