"""Allocation, factories and copies through the real torch_npu on aclsim (in the pytest process)."""

from __future__ import annotations

import pytest
import torch
import torch_npu  # noqa: F401  (registers the npu device)
from simacl import requires_aclsim

pytestmark = requires_aclsim

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool]
DEVICES = [0, 1, 2, 3]


def sample(dtype: torch.dtype, shape: tuple[int, ...] = (6, 10)) -> torch.Tensor:
    """Deterministic values that exercise every bit pattern class of the dtype."""
    g = torch.Generator().manual_seed(1234)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype == torch.int64:
        t = torch.randint(-(2**62), 2**62, shape, generator=g, dtype=torch.int64)
        t.view(-1)[:3] = torch.tensor([torch.iinfo(torch.int64).min, torch.iinfo(torch.int64).max, 0])
        return t
    t = (torch.randn(shape, generator=g) * 1000).to(dtype)
    specials = torch.tensor([float("inf"), float("-inf"), -0.0, torch.finfo(dtype).tiny], dtype=dtype)
    t.view(-1)[: specials.numel()] = specials
    return t


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exact equality including signed zeros, dtype and shape."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.devices(4)
def test_set_device_and_current_device() -> None:
    """set_device switches the current device; tensors land where asked."""
    for d in DEVICES:
        torch.npu.set_device(d)
        assert torch.npu.current_device() == d
        assert torch.empty(3, device="npu").device == torch.device("npu", d)
    torch.npu.set_device(0)


@pytest.mark.parametrize("device", [pytest.param(d, marks=pytest.mark.devices(d + 1)) for d in DEVICES])
def test_factories(device: int) -> None:
    """empty/zeros/ones/full/arange on npu:k produce the CPU values."""
    dev = f"npu:{device}"
    e = torch.empty((4, 5), device=dev, dtype=torch.float16)
    assert e.device == torch.device("npu", device) and e.shape == (4, 5) and e.dtype == torch.float16
    assert torch.equal(torch.zeros(7, device=dev).cpu(), torch.zeros(7))
    assert torch.equal(torch.ones((2, 3), device=dev, dtype=torch.int64).cpu(), torch.ones((2, 3), dtype=torch.int64))
    assert torch.equal(torch.full((3, 3), 2.5, device=dev).cpu(), torch.full((3, 3), 2.5))
    assert torch.equal(torch.arange(0, 20, 3, device=dev).cpu(), torch.arange(0, 20, 3))
    assert torch.equal(torch.arange(0.0, 1.0, 0.125, device=dev).cpu(), torch.arange(0.0, 1.0, 0.125))


@pytest.mark.devices(4)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_every_device(dtype: torch.dtype) -> None:
    """H2D with .to('npu:k') and D2H with .cpu() are bit exact on every device."""
    x = sample(dtype)
    for d in DEVICES:
        y = x.to(f"npu:{d}")
        assert y.device == torch.device("npu", d)
        assert same_bits(y.cpu(), x)


@pytest.mark.devices(4)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_same_and_cross_device_copies(dtype: torch.dtype) -> None:
    """D2D on one device (clone, copy_) and across devices (.to, copy_) are bit exact."""
    x = sample(dtype)
    a = x.to("npu:0")
    same = torch.empty_like(a)
    same.copy_(a)
    assert same_bits(same.cpu(), x)
    assert same_bits(a.clone().cpu(), x)
    for d in (1, 2, 3):
        b = a.to(f"npu:{d}")
        assert b.device == torch.device("npu", d)
        assert same_bits(b.cpu(), x)
        back = torch.empty_like(a)
        back.copy_(b)
        assert same_bits(back.cpu(), x)
    # A chain 1 -> 2 -> 3 -> 0.
    c = a.to("npu:1").to("npu:2").to("npu:3").to("npu:0")
    assert same_bits(c.cpu(), x)


def test_non_blocking_copies() -> None:
    """Pinned non-blocking H2D and D2H copies are exact after a synchronize."""
    x = sample(torch.float32, (64, 64)).pin_memory()
    y = x.to("npu:0", non_blocking=True)
    out = torch.empty_like(x).pin_memory()
    out.copy_(y, non_blocking=True)
    torch.npu.synchronize()
    assert same_bits(out, x)


@pytest.mark.devices(4)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous_views(dtype: torch.dtype) -> None:
    """Transposed, strided and offset views round-trip exactly in both directions and across devices."""
    x = sample(dtype, (8, 12))
    d = x.to("npu:0")
    views = {
        "transpose": (lambda t: t.t()),
        "step": (lambda t: t[:, ::3]),
        "offset": (lambda t: t[2:6, 5:11]),
        "step-offset-t": (lambda t: t[1::2, 3:].t()),
    }
    for name, view in views.items():
        v = view(d)
        assert not v.is_contiguous(), name
        assert same_bits(v.cpu(), view(x)), f"D2H of {name}"
        assert same_bits(view(x).to("npu:0").cpu(), view(x)), f"H2D of {name}"
        assert same_bits(v.contiguous().cpu(), view(x)), f"same-device gather of {name}"
        # torch_npu moves a non-contiguous tensor across devices with the aclop
        # "ViewCopy" (not an aclnn op, so not simulated): gather first.
        assert same_bits(v.contiguous().to("npu:2").cpu(), view(x)), f"cross-device {name}"
    # Writing into a non-contiguous destination view leaves the rest intact.
    dst = torch.zeros((8, 12), dtype=dtype, device="npu:1")
    dst[:, ::3] = d[:, ::3].contiguous().to("npu:1")
    want = torch.zeros((8, 12), dtype=dtype)
    want[:, ::3] = x[:, ::3]
    assert same_bits(dst.cpu(), want)


def test_memory_accounting() -> None:
    """mem_get_info reports a finite device, and allocations show up in memory_allocated."""
    free, total = torch.npu.mem_get_info(0)
    assert 0 < free <= total
    before = torch.npu.memory_allocated(0)
    t = torch.empty(1 << 20, device="npu:0")
    assert torch.npu.memory_allocated(0) >= before + (4 << 20)
    del t
