"""Fuzzed tensor descriptors (issue 4): malformed input raises TypeError/ValueError/RuntimeError, never crashes.

The fuzzing runs in a spawned receiver while a live producer holds the
tensors the valid descriptors name, so a segfault or abort fails the test
(the worker dies without a report) instead of killing pytest.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
import torch
import torch_npu
from helpers import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from sharing_util import Scenario, get

import aclsim
import torch_npu_ipc
from torch_npu_ipc import sharing

pytestmark = pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)")

ALLOWED = (TypeError, ValueError, RuntimeError)
SETTINGS = fuzz_settings(150)


def _import(data: Any, device: Any = None) -> None:
    """import_tensor that may only fail with the documented exceptions."""
    try:
        t = torch_npu_ipc.import_tensor(data, device)
    except ALLOWED:
        return
    del t  # a mutation that still describes a valid send: fine, once


def _recrc(data: bytes) -> bytes:
    """Recompute the checksum, so a mutated body reaches the field validation and the runtime."""
    return data[:-4] + struct.pack("<I", zlib.crc32(data[:-4]))


def _fuzzer(q: Any, back: Any) -> None:
    descs: list[bytes] = get(q)
    head = len(sharing.MAGIC) + 6

    # A valid descriptor works once, and a second use is a clear RuntimeError.
    t = torch_npu_ipc.import_tensor(descs[0])
    assert torch.equal(t.cpu(), torch.arange(64, dtype=torch.float32))
    with pytest.raises(RuntimeError, match="received already"):
        torch_npu_ipc.import_tensor(descs[0])
    for bad in (None, 3, "x" * 80, [1, 2], object()):
        with pytest.raises(TypeError):
            torch_npu_ipc.import_tensor(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        torch_npu_ipc.import_tensor(descs[1], device="cpu")

    # A forged block size or device (checksum recomputed) is refused before the import, so the
    # receiver can never read past the memory the key maps, and the genuine descriptor still works.
    (block_size,) = struct.unpack_from("<Q", descs[1], head + 12)
    for pos, fmt, value, match in (
        (12, "<Q", block_size + (1 << 20), "forged tensor descriptor"),
        (12, "<Q", block_size - 4096, "forged tensor descriptor"),
        (4, "<q", 1, "forged tensor descriptor"),
        (4, "<q", 3, "forged tensor descriptor"),
        (4, "<q", 64, "forged tensor descriptor"),
        (4, "<q", 256, "malformed tensor descriptor: device"),
        (4, "<q", -1, "malformed tensor descriptor: device"),
        # The sender's device, the default target: one this process lacks, or none.
        (55, "<q", 64, "sent from npu:64, which this process does not have"),
        (55, "<q", -1, "malformed tensor descriptor"),
    ):
        b = bytearray(descs[1])
        struct.pack_into(fmt, b, head + pos, value)
        with pytest.raises(ValueError, match=match):
            torch_npu_ipc.import_tensor(_recrc(bytes(b)))
    with pytest.raises(ValueError, match="does not exist"):
        torch_npu_ipc.import_tensor(descs[1], device=7)
    genuine = torch_npu_ipc.import_tensor(descs[1])
    assert torch.equal(genuine.cpu(), torch.full((4, 8), 2.0).t())
    del genuine

    @SETTINGS
    @given(st.binary(max_size=512))
    def random_bytes(data: bytes) -> None:
        with pytest.raises(ValueError):
            torch_npu_ipc.import_tensor(data)

    @SETTINGS
    @given(st.sampled_from(descs), st.data())
    def truncated(desc: bytes, data: st.DataObject) -> None:
        n = data.draw(st.integers(0, len(desc) - 1))
        with pytest.raises(ValueError):
            torch_npu_ipc.import_tensor(desc[:n])
        with pytest.raises(ValueError):
            torch_npu_ipc.import_tensor(desc + data.draw(st.binary(min_size=1, max_size=8)))

    @SETTINGS
    @given(st.sampled_from(descs), st.lists(st.integers(0, 10**6), min_size=1, max_size=3, unique=True))
    def bit_flips(desc: bytes, positions: list[int]) -> None:
        b = bytearray(desc)
        bits = sorted({p % (8 * len(b)) for p in positions})
        for p in bits:
            b[p // 8] ^= 1 << (p % 8)
        # CRC-32 detects every 1-3 bit error: forged descriptors are ValueErrors.
        with pytest.raises(ValueError):
            torch_npu_ipc.import_tensor(bytes(b))

    @SETTINGS
    @given(
        st.sampled_from(descs), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4)
    )
    def forged_fields(desc: bytes, edits: list[tuple[int, int]]) -> None:
        # Byte edits in the body with a recomputed checksum: they get past the checksum
        # into field validation, the shared table, the IPC key and event handle.
        b = bytearray(desc)
        body = len(b) - 4 - head
        for pos, val in edits:
            b[head + pos % body] = val
        _import(_recrc(bytes(b)))

    @SETTINGS
    @given(st.sampled_from(descs), st.integers(-(2**40), 2**40))
    def forged_device(desc: bytes, device: int) -> None:
        b = bytearray(desc)
        struct.pack_into("<q", b, head + 4, device)  # the device field follows producer_pid
        _import(_recrc(bytes(b)))
        _import(desc, device)

    for test in (random_bytes, truncated, bit_flips, forged_fields, forged_device):
        test()
    del t
    back.put("done")


def _producer(q: Any, back: Any) -> None:
    base = torch.arange(64, dtype=torch.float32, device="npu:0")
    others = [
        torch.full((4, 8), 2.0, device="npu:0").t(),
        torch.ones(3, 5, dtype=torch.int64, device="npu:0")[1:, 2:],
        torch.zeros(0, device="npu:0"),
        torch.arange(300, dtype=torch.float16, device="npu:0")[7:],
    ]
    descs = [torch_npu_ipc.export_tensor(base)] + [torch_npu_ipc.export_tensor(t) for t in others for _ in range(3)]
    q.put(descs)
    assert get(back, timeout=600) == "done"
    del base, others
    torch_npu_ipc.ipc_collect()


@pytest.mark.devices(4)
def test_fuzzed_descriptors_only_raise() -> None:
    """Random bytes, truncations, bit flips, forged fields: only TypeError/ValueError/RuntimeError."""
    s = Scenario()
    q, back = s.queue(), s.queue()
    s.start("fuzzer", _fuzzer, q, back)
    s.start("producer", _producer, q, back)
    s.finish(timeout=600)


def _refuser() -> None:
    before = torch_npu_ipc.sharing_stats()
    refused = [
        (torch.empty(4, dtype=torch.bits8, device="npu:0"), TypeError, "cannot share a tensor of dtype torch.bits8"),
        (torch.empty(4, dtype=torch.bits16, device="npu:0"), TypeError, "a descriptor carries float32"),
        (torch.empty([1] * 65, device="npu:0"), ValueError, "65 dimensions: a descriptor carries at most 64"),
    ]
    # A private NPU format (made without running an operator aclsim lacks).
    torch.npu.config.allow_internal_format = True
    nz = torch_npu.empty_with_format((16, 16), dtype=torch.float32, device="npu:0", acl_format=29)
    torch.npu.config.allow_internal_format = False
    refused.append((nz, ValueError, "private format (FRACTAL_NZ|29).*npu_format_cast"))
    for t, exc, match in refused:
        with pytest.raises(exc, match=match):
            torch_npu_ipc.export_tensor(t)
        with pytest.raises(exc, match=match):
            sharing.reduce_npu_tensor(t)  # what a Queue's pickling calls
    after = torch_npu_ipc.sharing_stats()
    # Refused before anything was taken: no reference slot, no in-flight event to wait for at exit.
    assert after["live_slots"] == before["live_slots"] == 0, (before, after)
    assert after["inflight_events"] == before["inflight_events"], (before, after)
    # A descriptor naming no dtype code is refused at decode.
    desc = torch_npu_ipc.export_tensor(torch.ones(3, device="npu:0"))
    head = len(sharing.MAGIC) + 6
    for code in (len(sharing._DTYPES), 255):
        b = bytearray(desc)
        b[head + 44] = code  # the dtype code follows pid, device, three u64 and two u32
        with pytest.raises(ValueError, match="malformed tensor descriptor: bad dims or dtype"):
            torch_npu_ipc.import_tensor(_recrc(bytes(b)))
    # requires_grad on an integer tensor, or elements in an empty storage: refused before the
    # descriptor is claimed, so the genuine one still works afterwards.
    ints = torch.arange(6, device="npu:0")
    desc = torch_npu_ipc.export_tensor(ints)
    b = bytearray(desc)
    b[head + 45] = 1  # requires_grad follows the dtype code
    with pytest.raises(ValueError, match=r"requires_grad on a tensor of dtype torch\.int64"):
        torch_npu_ipc.import_tensor(_recrc(bytes(b)))
    assert torch.equal(torch_npu_ipc.import_tensor(desc).cpu(), torch.arange(6))
    b = bytearray(torch_npu_ipc.export_tensor(torch.empty(0, device="npu:0")))
    struct.pack_into("<q", b, head + sharing._FIXED.size, 1 << 40)  # the one size
    with pytest.raises(ValueError, match="elements in an empty storage"):
        torch_npu_ipc.import_tensor(_recrc(bytes(b)))
    # A receiver whose torch lacks a dtype that the sender's has (complex32 removed from its table,
    # as in a torch without it) refuses by name.
    desc = torch_npu_ipc.export_tensor(torch.ones(3, dtype=torch.complex32).to("npu:0"))
    code = sharing._DTYPE_NAMES.index("complex32")
    sharing._DTYPES = (*sharing._DTYPES[:code], None, *sharing._DTYPES[code + 1 :])
    with pytest.raises(ValueError, match=r"dtype torch.complex32 does not exist in this torch"):
        torch_npu_ipc.import_tensor(desc)


def test_unshareable_tensor_is_refused_before_anything_is_taken() -> None:
    """An unsupported dtype or too many dimensions raises at once and leaves no slot or event taken."""
    s = Scenario()
    s.start("refuser", _refuser)
    s.finish()


# ------------------------------------------------------------------ generated layouts round trip
LAYOUT_DTYPES = [torch.float32, torch.int64, torch.float16, torch.bfloat16, torch.bool, torch.uint8, torch.complex64]


@st.composite
def layouts(draw: st.DrawFn) -> tuple[torch.dtype, int, tuple[int, ...], tuple[int, ...], int, str]:
    """(dtype, storage elements, size, stride, storage offset, transport) of a strided view that fits its storage.

    Strides may be 0 (expanded) or overlap; sizes may be 0.
    """
    dtype = draw(st.sampled_from(LAYOUT_DTYPES))
    n = draw(st.integers(0, 96))
    size = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    stride = tuple(draw(st.lists(st.integers(0, 9), min_size=len(size), max_size=len(size))))
    span = 0 if 0 in size else sum((k - 1) * s for k, s in zip(size, stride, strict=True)) + 1
    offset = draw(st.integers(0, max(0, n - span)))
    if span > n - offset:  # does not fit: the whole storage, one dimension
        size, stride, offset = (n,), (1,), 0
    return dtype, n, size, stride, offset, draw(st.sampled_from(["queue", "bytes"]))


def _layout_values(dtype: torch.dtype, n: int) -> torch.Tensor:
    a = torch.arange(n, dtype=torch.float64) % 97 + 1
    if dtype == torch.bool:
        return a > 50
    if dtype.is_complex:
        return torch.complex(a, -a).to(dtype)
    return a.to(dtype)


def _layout_receiver(q: Any, back: Any) -> None:
    while (msg := get(q)) is not None:
        transport, payload, (dtype, n, size, stride, offset) = msg
        t = payload if transport == "queue" else torch_npu_ipc.import_tensor(payload)
        what = f"{transport}: {dtype} storage {n} size {size} stride {stride} offset {offset}"
        assert t.device.type == "npu", what
        assert (t.dtype, tuple(t.shape), t.stride(), t.storage_offset()) == (dtype, size, stride, offset), what
        assert t.untyped_storage().nbytes() == n * dtype.itemsize, what
        want = _layout_values(dtype, n).as_strided(size, stride, offset)
        assert torch.equal(t.cpu(), want), what
        del t
        back.put("ok")


def _layout_sender(q: Any, back: Any) -> None:
    @fuzz_settings(100)
    @given(layouts())
    def send(layout: tuple[torch.dtype, int, tuple[int, ...], tuple[int, ...], int, str]) -> None:
        dtype, n, size, stride, offset, transport = layout
        t = _layout_values(dtype, n).to("npu:0").as_strided(size, stride, offset)
        q.put(
            (transport, t if transport == "queue" else torch_npu_ipc.export_tensor(t), (dtype, n, size, stride, offset))
        )
        assert get(back) == "ok"

    send()
    q.put(None)
    torch_npu_ipc.ipc_collect()


def test_generated_layouts_round_trip() -> None:
    """100 generated strided views (zero and overlapping strides, empty sizes, offsets, seven dtypes) arrive intact."""
    s = Scenario()
    q, back = s.queue(), s.queue()
    s.start("receiver", _layout_receiver, q, back)
    s.start("sender", _layout_sender, q, back)
    s.finish(timeout=600)
