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

from typing import Any

import pytest
import torch
import torch_npu  # noqa: F401
from event_turns import Actor, N, Turn
from helpers import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from plugin_util import open_native, requires_aclsim, share_native, synchronize_devices
from program_group import TIMEOUT, Inbox, Leader, follow, run_group

import torch_npu_ipc  # noqa: F401

pytestmark = [requires_aclsim, pytest.mark.devices(2)]

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


def _first(me: int, inboxes: list[Any], back: Any) -> None:
    """npu:0's T, shared with the second process; generates the programs and plays its turns."""
    t = torch.arange(N, dtype=torch.float32, device="npu:0")
    inboxes[1].put(share_native(t))
    actor = Actor(me, t, Inbox(inboxes[me]), inboxes[1])
    leader = Leader(inboxes, back)

    @fuzz_settings(60)
    @given(programs)
    def play(program: list[Turn]) -> None:
        synchronize_devices()
        t.copy_(torch.arange(N, dtype=torch.float32, device="npu:0"))
        synchronize_devices()
        mine, (theirs,) = leader.play(program, actor.run)
        final = theirs if mine is None else mine
        want = [float(sum(turn.add for turn in program))]
        assert final == want, f"{program}: T holds {final} above its start values at the end, expected {want}"

    try:
        play()
    finally:
        leader.stop()


def _second(me: int, inboxes: list[Any], back: Any) -> None:
    """Plays its turns of every program it is sent, until stopped."""
    t = open_native(inboxes[me].get(timeout=TIMEOUT))
    actor = Actor(me, t, Inbox(inboxes[me]), inboxes[0])
    # prepare: a failed program's work runs out first
    follow(actor.inbox, me, inboxes, back, actor.run, prepare=synchronize_devices)


def test_generated_event_programs_match_the_sequence() -> None:
    """60 programs of up to 12 turns between two processes, ordered by interprocess events only."""
    run_group(_first, _second, processes=2, timeout=600)
