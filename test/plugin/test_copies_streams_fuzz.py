"""Generated programs of writes and cross-device copies on changing current streams match the CPU (issue 5).

The barrier orders a copy with the *current* streams of both devices: the
source's (the copy runs there, after the destination's current stream
reached the copy) and the destination's (its later work waits for the
copy). Each example runs a program over four tensors on two NPUs and three
streams per device (the default stream and two pool streams). Every step
picks the current streams, and each write is queued behind device work, so
a copy ordered with the wrong stream reads or overwrites a value too early.
The program itself is correct the way a torch.cuda user writes it: a tensor
used on a stream other than the one of its last use waits for that stream
(``wait_stream``), and one used on a stream other than its allocation
stream is recorded there (``record_stream``). The same steps on CPU tensors
are the reference for every value read, and the copies never synchronize
the host.

The generated programs are fixed (``derandomize``); ``--soak`` runs ten
times as many.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
import torch_npu  # noqa: F401
from helpers import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from plugin_util import host_syncs, streams_per_device

import aclsim
import torch_npu_ipc  # noqa: F401
from torch_npu_ipc import copies

pytestmark = [
    pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)"),
    pytest.mark.devices(2),
]

SETTINGS = fuzz_settings(100)
# Every value the programs make is an integer of magnitude below 256, which all these hold exactly.
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]
SLOTS = 4  # tensor i lives on npu:(i % 2)
STREAMS = 3  # per device: the default stream and two pool streams
N = 64
WORK = 0.0005  # device time queued before each write, per unit of Write.work


@pytest.fixture(scope="module")
def streams() -> Iterator[list[list[torch.npu.Stream]]]:
    """Per device: the default stream and two pool streams; the copy hook on."""
    for d in range(2):
        torch.zeros(1, device=f"npu:{d}")
    copies.enable()
    yield streams_per_device()
    for d in range(2):
        torch.npu.set_stream(torch.npu.default_stream(d))
        torch.npu.synchronize(d)
    copies.enable()


@dataclass(frozen=True)
class Write:
    """Add ``add`` to tensor ``slot`` (then negate it if ``negate``) on stream ``stream`` of its device,
    behind ``work`` units of device time."""

    slot: int
    stream: int
    work: int
    add: int
    negate: bool


@dataclass(frozen=True)
class Copy:
    """Copy tensor ``src`` into tensor ``dst`` with ``how`` (``copy_``, or ``to`` / ``to_non_blocking``,
    which replace ``dst`` by a new tensor), the source device's current stream being ``src_stream``
    and the destination device's ``dst_stream``, and ``device`` the current device."""

    src: int
    dst: int
    src_stream: int
    dst_stream: int
    how: str
    device: int


@dataclass(frozen=True)
class Read:
    """Compare tensor ``slot`` with the reference, read on stream ``stream`` of its device."""

    slot: int
    stream: int


slot_ids = st.integers(0, SLOTS - 1)
stream_ids = st.integers(0, STREAMS - 1)
programs = st.lists(
    st.one_of(
        st.builds(Write, slot_ids, stream_ids, st.integers(0, 2), st.integers(-5, 5), st.booleans()),
        st.builds(
            Copy,
            slot_ids,
            slot_ids,
            stream_ids,
            stream_ids,
            st.sampled_from(["copy_", "to", "to_non_blocking"]),
            st.integers(0, 1),
        ),
        st.builds(Read, slot_ids, stream_ids),
    ),
    min_size=1,
    max_size=14,
)


class Slot:
    """One NPU tensor, its CPU reference, and the streams a correct program must respect."""

    def __init__(self, index: int, dtype: torch.dtype, streams: list[list[torch.npu.Stream]]) -> None:
        self.device = index % 2
        self.streams = streams[self.device]
        self.ref = ((torch.arange(N) + 3 * index) % 20).to(dtype)
        with torch.npu.stream(self.streams[0]):
            self.tensor = self.ref.to(f"npu:{self.device}")
        self.alloc = self.last = 0  # stream of the allocation, stream of the last use

    def use_on(self, stream: int) -> torch.npu.Stream:
        """Order a use on ``stream`` after the last use, as a correct program does; returns that stream."""
        s = self.streams[stream]
        if stream != self.last:
            s.wait_stream(self.streams[self.last])
        if stream != self.alloc:
            self.tensor.record_stream(s)
        self.last = stream
        return s


@SETTINGS
@given(dtypes=st.lists(st.sampled_from(DTYPES), min_size=SLOTS, max_size=SLOTS), program=programs)
def test_program_matches_cpu(
    streams: list[list[torch.npu.Stream]], dtypes: list[torch.dtype], program: list[Write | Copy | Read]
) -> None:
    slots = [Slot(i, dtype, streams) for i, dtype in enumerate(dtypes)]
    for n, step in enumerate(program):
        what = f"step {n} of {program}, dtypes {dtypes}"
        if isinstance(step, Write):
            slot = slots[step.slot]
            with torch.npu.stream(slot.use_on(step.stream)):
                if step.work:
                    aclsim.sleep(torch.npu.current_stream(slot.device).npu_stream, WORK * step.work)
                slot.tensor.add_(step.add)
                slot.ref.add_(step.add)
                if step.negate:
                    slot.tensor.neg_()
                    slot.ref.neg_()
        elif isinstance(step, Copy):
            src, dst = slots[step.src], slots[step.dst]
            if src is dst:
                continue
            same_device = src.device == dst.device
            dst_stream = step.src_stream if same_device else step.dst_stream  # one current stream per device
            s_src = src.use_on(step.src_stream)
            s_dst = dst.use_on(dst_stream)
            torch.npu.set_device(step.device)
            torch.npu.set_stream(s_src)
            torch.npu.set_stream(s_dst)
            before = host_syncs()
            if step.how == "copy_":
                dst.tensor.copy_(src.tensor)
                dst.ref.copy_(src.ref)
            else:
                dst.tensor = src.tensor.to(
                    f"npu:{dst.device}", dst.ref.dtype, non_blocking=step.how == "to_non_blocking", copy=True
                )
                dst.ref = src.ref.to(dst.ref.dtype, copy=True)
                dst.alloc = dst_stream  # allocated on the destination device's current stream
            assert host_syncs() == before, f"{what}: the copy synchronized the host"
            for d in range(2):
                torch.npu.set_stream(streams[d][0])
        else:
            slot = slots[step.slot]
            with torch.npu.stream(slot.use_on(step.stream)):
                assert torch.equal(slot.tensor.cpu(), slot.ref), what
    for slot in slots:
        with torch.npu.stream(slot.use_on(0)):
            assert torch.equal(slot.tensor.cpu(), slot.ref), f"end of {program}, dtypes {dtypes}"
