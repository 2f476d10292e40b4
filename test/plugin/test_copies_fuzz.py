"""Cross-device copies of generated layouts and dtypes give exactly what the CPU gives (issue 5), on aclsim.

Each example builds a tensor on one NPU, written behind a little device
work, takes a view of it (transposes, steps, narrows, permutations,
expansions, offsets), and copies it to another NPU by ``.to()`` or
``copy_`` (into a fresh tensor, a strided view, a dense permutation, or
with broadcasting), with or without a dtype change. The same steps on CPU
tensors are the reference: values, and for ``.to()`` the strides
(``memory_format=preserve`` keeps a dense source's strides and another
source's dimension order, as ``at::native::_to_copy``; a torch_npu that
implements ``to(device, dtype)`` itself, such as 2.7.1, makes that one
contiguous). The host must never synchronize a stream during the copy.

The generated examples are fixed (``derandomize``); ``--soak`` runs ten
times as many.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
import torch_npu  # noqa: F401
from helpers import fuzz_settings, torch_npu_owns_to_device
from hypothesis import given
from hypothesis import strategies as st
from plugin_util import host_syncs

import aclsim
import torch_npu_ipc  # noqa: F401
from torch_npu_ipc import copies

pytestmark = [
    pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)"),
    pytest.mark.devices(2),
]

SETTINGS = fuzz_settings(200)
DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]
HOW = [
    "to",
    "to_non_blocking",
    "to_contiguous",
    "copy_",
    "copy_into_strided",
    "copy_into_permuted",
    "broadcast",
    "broadcast_into_strided",
]
WORK = 0.001  # device time queued before the source's write (the copy must wait for it)
TORCH_NPU_TO_DEVICE = torch_npu_owns_to_device()


@pytest.fixture(autouse=True, scope="module")
def _hook_on() -> Iterator[None]:
    for d in range(2):
        torch.zeros(1, device=f"npu:{d}")
    copies.enable()
    yield
    copies.enable()


@dataclass(frozen=True)
class View:
    """One view step, applied alike to the CPU reference and to the NPU tensor."""

    op: str
    a: int = 0
    b: int = 0

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0:
            return t
        d = self.a % t.dim()
        if self.op == "transpose":
            return t.transpose(d, self.b % t.dim())
        if self.op == "step":
            return t[(slice(None),) * d + (slice(None, None, 2 + self.b % 2),)]
        if self.op == "narrow":
            start = self.b % t.shape[d]
            return t.narrow(d, start, max(1, (t.shape[d] - start) // 2 + 1))
        if self.op == "expand":
            return t.unsqueeze(d).expand(*t.shape[:d], 2 + self.b % 2, *t.shape[d:])
        if self.op == "select" and t.dim() >= 2:
            return t.select(d, self.b % t.shape[d])
        if self.op == "offset" and t.shape[d] > 1:
            return t.narrow(d, 1, t.shape[d] - 1)
        if self.op == "flip_dims":
            return t.permute(list(reversed(range(t.dim()))))
        return t


views = st.lists(
    st.builds(
        View,
        st.sampled_from(["transpose", "step", "narrow", "expand", "select", "offset", "flip_dims"]),
        st.integers(0, 5),
        st.integers(0, 5),
    ),
    max_size=3,
)


def values(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Small exact values (quarters below 25) that every dtype above holds or rounds alike on CPU and NPU."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 100, shape, generator=g).to(torch.float64) / 4
    return x > 10 if dtype == torch.bool else x.to(dtype)


def dense_permuted(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """A dense, non-contiguous tensor of ``shape`` (dimensions stored in reverse order), filled with 99."""
    return torch.full(tuple(reversed(shape)), 99, dtype=dtype, device=device).permute(list(reversed(range(len(shape)))))


def copied_into_strided(src: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """A tensor of 99s with ``src`` copied into a non-dense view of it of ``shape`` (every second element
    of the last dimension); returns the whole tensor."""
    base = torch.full((*shape[:-1], shape[-1] * 2) if shape else (3,), 99, dtype=dtype, device=device)
    (base[..., ::2] if shape else base[1]).copy_(src)
    return base


@SETTINGS
@given(
    shape=st.lists(st.integers(1, 5), max_size=3).map(tuple),
    steps=views,
    src_dtype=st.sampled_from(DTYPES),
    dst_dtype=st.sampled_from([None, *DTYPES]),
    how=st.sampled_from(HOW),
    reverse=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_copy_matches_cpu(
    *,
    shape: tuple[int, ...],
    steps: list[View],
    src_dtype: torch.dtype,
    dst_dtype: torch.dtype | None,
    how: str,
    reverse: bool,
    seed: int,
) -> None:
    s, d = (1, 0) if reverse else (0, 1)
    to_dtype = {} if dst_dtype is None else {"dtype": dst_dtype}  # .to(device) and .to(device, dtype)
    dst_dtype = dst_dtype or src_dtype
    ref_base = values(shape, src_dtype, seed)
    base = torch.zeros(shape, dtype=src_dtype, device=f"npu:{s}")
    data = ref_base.to(base.device)
    aclsim.sleep(torch.npu.current_stream(s).npu_stream, WORK)
    base.copy_(data)  # the source's final values land behind WORK of device time
    ref, src = ref_base, base
    for step in steps:
        ref, src = step(ref), step(src)
    what = f"{tuple(ref.shape)} stride {ref.stride()} {src_dtype} -> {dst_dtype}, npu:{s} -> npu:{d}, {how}"

    before = host_syncs()
    if how.startswith("to"):
        kwargs = {"memory_format": torch.contiguous_format} if how == "to_contiguous" else {}
        got = src.to(f"npu:{d}", non_blocking=how == "to_non_blocking", **to_dtype, **kwargs)
        want = ref.to(dst_dtype, copy=True, **kwargs)
        assert (got.device, got.dtype, got.shape) == (torch.device(f"npu:{d}"), dst_dtype, want.shape), what
        if to_dtype and TORCH_NPU_TO_DEVICE:  # torch_npu's own to(device, dtype) makes it contiguous
            assert got.is_contiguous(), what
        else:
            assert got.stride() == want.stride(), what
        out = got
    elif how == "copy_":
        out = torch.full(ref.shape, 99, dtype=dst_dtype, device=f"npu:{d}").copy_(src)
        want = torch.full(ref.shape, 99, dtype=dst_dtype).copy_(ref)
    elif how == "copy_into_permuted":
        out = dense_permuted(tuple(ref.shape), dst_dtype, f"npu:{d}").copy_(src)
        want = dense_permuted(tuple(ref.shape), dst_dtype, "cpu").copy_(ref)
    elif how == "copy_into_strided":
        out = copied_into_strided(src, tuple(ref.shape), dst_dtype, f"npu:{d}")
        want = copied_into_strided(ref, tuple(ref.shape), dst_dtype, "cpu")
    else:  # broadcast*: one more leading dimension, and size-1 dimensions of the source expanded
        target = (3, *(2 if n == 1 else n for n in ref.shape))
        if how == "broadcast":
            out = torch.zeros(target, dtype=dst_dtype, device=f"npu:{d}").copy_(src)
            want = torch.zeros(target, dtype=dst_dtype).copy_(ref)
        else:  # broadcast_into_strided: into a non-dense view of that shape
            out = copied_into_strided(src, target, dst_dtype, f"npu:{d}")
            want = copied_into_strided(ref, target, dst_dtype, "cpu")
    after = host_syncs()
    assert after == before, f"{what}: the host synchronized ({before} -> {after})"
    assert torch.equal(out.cpu(), want), what
