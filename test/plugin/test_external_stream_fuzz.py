"""Generated hand-over programs between a foreign library and torch on one ExternalStream, on aclsim.

Each example is a random sequence of steps on one tensor ``x``: the other
library (``other_lib.OtherLib``, raw ACL) overwrites it or copies it out on
its stream, behind a little simulated device time; torch adds to it on the
ExternalStream, copies it, queues slow work there, works on it on a side
stream ordered by ``wait_stream`` / events (torch_npu's or the plugin's,
interprocess or not), or wraps the stream anew. The program follows the
documented protocol, ``ext.fence()`` at every hand-over between the library
and torch, and nothing else; every copy taken along the way and the final
value must be what running the steps in order gives. Both implementations
(native and proxy) run the same programs. ``--soak`` runs ten times as many.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
import torch_npu
from helpers import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from other_lib import D2D, OtherLib

import aclsim
import torch_npu_ipc
from torch_npu_ipc import streams as ext_streams

pytestmark = pytest.mark.skipif(not aclsim.is_active(), reason="needs aclsim (simulated device time)")

N = 64
VALUES = range(1, 6)  # what the library writes (one device buffer each)
DELAYS = (0.0, 0.001, 0.003)  # simulated device time before a step's work
SETTINGS = fuzz_settings(50)


@dataclass(frozen=True)
class Step:
    """One step of a program; ``owner`` steps are the library's, the others torch's."""

    kind: str
    value: int = 0
    delay: float = 0.0

    @property
    def owner(self) -> bool:
        return self.kind.startswith("owner")


steps = st.lists(
    st.builds(
        Step,
        st.sampled_from(
            [
                "owner_set",
                "owner_copy_out",
                "add",
                "copy_out",
                "slow",
                "side_wait_stream",
                "side_torch_event",
                "side_ipc_event",
                "rewrap",
            ]
        ),
        st.sampled_from(VALUES),
        st.sampled_from(DELAYS),
    ),
    min_size=1,
    max_size=10,
)


@dataclass
class Library:
    """The foreign library's side: its stream and its buffers of constant values."""

    lib: OtherLib
    stream: int
    consts: dict[int, int]


@pytest.fixture(scope="module")
def library() -> Iterator[Library]:
    torch.npu.set_device(0)
    lib = OtherLib()
    stream = lib.create_stream(0)
    consts = {v: lib.device_buffer(0, torch.full((N,), float(v)).numpy().tobytes()) for v in VALUES}
    yield Library(lib, stream, consts)
    lib.destroy_stream(stream)


def order(stream: torch_npu.npu.Stream, *, after: torch_npu.npu.Stream, how: str) -> None:
    """Make ``stream``'s later work wait for the work queued on ``after`` so far, the way ``how`` names."""
    if how == "side_wait_stream":
        stream.wait_stream(after)
        return
    ev = torch_npu_ipc.Event(interprocess=True) if how == "side_ipc_event" else torch.npu.Event()
    ev.record(after)
    stream.wait_event(ev)


def run_program(program: list[Step], library: Library) -> None:
    raw = library.stream
    x = torch.zeros(N, device="npu:0")
    owner_outs = [torch.full((N,), -1.0, device="npu:0") for step in program if step.kind == "owner_copy_out"]
    side = torch.npu.Stream(device=0)
    torch.npu.synchronize()  # x and the buffers were filled on torch's default stream

    ext = torch_npu_ipc.ExternalStream(raw)
    model = 0.0  # x's value after the steps so far
    want: list[tuple[torch.Tensor, float]] = []  # copies taken and the value each must hold
    last_owner: bool | None = None
    for step in program:
        if last_owner is not None and step.owner != last_owner:
            ext.fence()  # the documented hand-over
        last_owner = step.owner
        if step.kind == "owner_set":
            aclsim.sleep(raw, step.delay)
            library.lib.copy_async(x.data_ptr(), library.consts[step.value], N * 4, D2D, raw)
            model = float(step.value)
        elif step.kind == "owner_copy_out":
            aclsim.sleep(raw, step.delay)
            out = owner_outs.pop()
            library.lib.copy_async(out.data_ptr(), x.data_ptr(), N * 4, D2D, raw)
            want.append((out, model))
        elif step.kind == "add":
            with torch.npu.stream(ext):
                x.add_(step.value)
            model += step.value
        elif step.kind == "copy_out":
            with torch.npu.stream(ext):
                want.append((x.clone(), model))
        elif step.kind == "slow":
            with torch.npu.stream(ext):
                aclsim.sleep(torch.npu.current_stream().npu_stream, step.delay)
        elif step.kind == "rewrap":
            ext = torch_npu_ipc.ExternalStream(raw)
        else:  # side_*: x changes on a torch stream ordered after ext and before ext's next work
            order(side, after=ext, how=step.kind)
            with torch.npu.stream(side):
                aclsim.sleep(side.npu_stream, step.delay)
                x.mul_(2)
            model *= 2
            order(ext, after=side, how=step.kind)
    ext.synchronize()
    torch.npu.synchronize()
    got = [(t.cpu(), value) for t, value in want]
    assert all(torch.equal(t, torch.full((N,), value)) for t, value in got), [(t[0].item(), value) for t, value in got]
    assert torch.equal(x.cpu(), torch.full((N,), model)), (x[0].item(), model)


@pytest.mark.parametrize("impl", ["native", "proxy"])
def test_hand_over_programs(impl: str, library: Library, monkeypatch: pytest.MonkeyPatch) -> None:
    if impl == "native" and (ext_streams._from_external is None or ext_streams.per_stream_queue_refusal()):
        pytest.skip(f"torch_npu {torch_npu.__version__} runs no native ExternalStream here (see test_external_stream)")
    if impl == "proxy":
        monkeypatch.setattr(ext_streams, "_from_external", None)

    @SETTINGS
    @given(program=steps)
    def check(program: list[Step]) -> None:
        run_program(program, library)

    check()
