"""Device ops through aclsim's aclnn library, compared with the CPU.

An op aclsim does not implement must fail with a Python RuntimeError that
names it. That case runs in a subprocess: after a failed op torch_npu's
task queue stops running later ops, which would poison the pytest process.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch_npu  # noqa: F401  (registers the npu device)
from simacl import requires_aclsim

pytestmark = requires_aclsim

DEVICE = "npu:0"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64], ids=str)
def test_inplace_fill_zero_add_mul(dtype: torch.dtype) -> None:
    """fill_, zero_, add_/mul_ by scalar and by tensor match the CPU exactly."""
    base = torch.arange(-12, 12, dtype=dtype).reshape(4, 6)
    other = (torch.arange(24, dtype=dtype).reshape(4, 6) % 5) + 1
    for op in (
        lambda t, o: t.fill_(3),
        lambda t, o: t.zero_(),
        lambda t, o: t.add_(2),
        lambda t, o: t.add_(o),
        lambda t, o: t.add_(o, alpha=3),
        lambda t, o: t.mul_(3),
        lambda t, o: t.mul_(o),
    ):
        cpu = base.clone()
        dev = base.to(DEVICE)
        op(cpu, other)
        op(dev, other.to(DEVICE))
        assert torch.equal(dev.cpu(), cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_out_of_place_ops(dtype: torch.dtype) -> None:
    """a + b, a * b, a + 1, a * 2 and clone produce the CPU values on every device."""
    a = torch.arange(10, dtype=dtype)
    b = torch.arange(10, 20, dtype=dtype)
    for d in range(4):
        da, db = a.to(f"npu:{d}"), b.to(f"npu:{d}")
        assert torch.equal((da + db).cpu(), a + b)
        assert torch.equal((da * db).cpu(), a * b)
        assert torch.equal((da + 1).cpu(), a + 1)
        assert torch.equal((da * 2).cpu(), a * 2)
        c = da.clone()
        assert c.data_ptr() != da.data_ptr()
        c.add_(1)
        assert torch.equal(da.cpu(), a), "clone shares storage with its source"
        assert torch.equal(c.cpu(), a + 1)


def test_ops_on_non_contiguous_views() -> None:
    """In-place ops on a strided view touch only the view's elements."""
    cpu = torch.arange(30, dtype=torch.float32).reshape(5, 6)
    dev = cpu.to(DEVICE)
    for t in (cpu, dev):
        t[:, ::2].add_(100)
        t[1:4, 1::2].mul_(-1)
        t.t()[2].fill_(7)
    assert torch.equal(dev.cpu(), cpu)
    assert torch.equal(dev.t().clone().cpu(), cpu.t().contiguous())


def test_ops_follow_stream_order() -> None:
    """Ops on one stream run in issue order (a chain of in-place ops)."""
    t = torch.zeros(1000, device=DEVICE)
    for i in range(50):
        t.add_(1)
        t.mul_(2) if i % 10 == 0 else None
    want = torch.zeros(1000)
    for i in range(50):
        want.add_(1)
        want.mul_(2) if i % 10 == 0 else None
    assert torch.equal(t.cpu(), want)


UNIMPLEMENTED = r"""
import sys
import time
import torch, torch_npu
x = torch.ones(8, device="npu:0")
# torch_npu's queue thread empties a failed queue before it marks the queue failed, so a
# call in between passes and the error surfaces on a later one: ask again, for a bounded time.
deadline = time.monotonic() + 20.0
try:
    y = torch.OPNAME(x)
    y.cpu()
    while time.monotonic() < deadline:
        torch.npu.synchronize()
        time.sleep(0.01)
except RuntimeError as e:
    print("RAISED", type(e).__name__)
    print(str(e))
    sys.exit(0)
print("NO ERROR")
sys.exit(3)
"""


def test_unimplemented_op_raises_naming_it() -> None:
    """torch.sin (aclnnSin is not simulated) raises RuntimeError naming the op; no crash."""
    code = UNIMPLEMENTED.replace("OPNAME", "sin")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=90)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "RAISED RuntimeError" in proc.stdout, out
    assert "'Sin'" in proc.stdout, out
    assert "not implemented by the simulator" in proc.stdout, out


SUMS = {
    "all": lambda t: t.sum(),
    "dim": lambda t: t.sum(1),
    "dims_keepdim": lambda t: t.sum((0, 2), keepdim=True),
    "negative_dim": lambda t: t.sum(-1),
    "dtype_arg": lambda t: t.sum(1, dtype=torch.float64),
    "non_contiguous": lambda t: t.transpose(0, 2).sum(0),
    "empty_dim": lambda t: t[:, :0].sum(1),
    "zero_dim": lambda t: t[0, 0, 0].sum(),
}


@pytest.mark.parametrize("case", sorted(SUMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_sum_matches_cpu(case: str, dtype: torch.dtype) -> None:
    """Tensor.sum (aclnnReduceSum): the CPU's dtype, shape and values."""
    a = (torch.arange(24) % 7).reshape(2, 3, 4).to(dtype)
    want = SUMS[case](a)
    got = SUMS[case](a.to(DEVICE)).cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want)


def test_reduce_sum_refuses_bad_arguments() -> None:
    """aclnnReduceSum's first phase refuses an out of the wrong shape or dtype and a dimension out of range."""
    import ctypes

    import aclsim

    lib = ctypes.CDLL(str(aclsim.lib_dir() / "libopapi.so"))
    i64p = ctypes.POINTER(ctypes.c_int64)
    lib.aclCreateTensor.restype = ctypes.c_void_p
    lib.aclCreateTensor.argtypes = [i64p, ctypes.c_uint64, ctypes.c_int, i64p, ctypes.c_int64, ctypes.c_int]
    lib.aclCreateTensor.argtypes += [i64p, ctypes.c_uint64, ctypes.c_void_p]
    lib.aclCreateIntArray.restype = ctypes.c_void_p
    lib.aclCreateIntArray.argtypes = [i64p, ctypes.c_uint64]
    lib.aclnnReduceSumGetWorkspaceSize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_bool, ctypes.c_int]
    lib.aclnnReduceSumGetWorkspaceSize.argtypes += [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
    lib.aclnnReduceSumGetWorkspaceSize.argtypes += [ctypes.POINTER(ctypes.c_void_p)]
    float32, int64 = 0, 9  # aclDataType
    keep = []

    def tensor(t: torch.Tensor, dtype: int) -> int:
        dims = (ctypes.c_int64 * t.dim())(*t.shape)
        strides = (ctypes.c_int64 * t.dim())(*t.stride())
        storage = (ctypes.c_int64 * 1)(t.numel())
        keep.extend((dims, strides, storage))
        return lib.aclCreateTensor(dims, t.dim(), dtype, strides, 0, 2, storage, 1, t.data_ptr())

    def status(src: int, dims: list[int], out: int, dtype: int = float32) -> int:
        arr = (ctypes.c_int64 * len(dims))(*dims)
        keep.append(arr)
        ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
        return lib.aclnnReduceSumGetWorkspaceSize(
            src, lib.aclCreateIntArray(arr, len(dims)), False, dtype, out, ctypes.byref(ws), ctypes.byref(ex)
        )

    x = torch.zeros(2, 3, device=DEVICE)
    good, bad = torch.zeros(3, device=DEVICE), torch.zeros(2, device=DEVICE)
    src = tensor(x, float32)
    assert status(src, [0], tensor(good, float32)) == 0
    assert status(src, [0], tensor(bad, float32)) != 0  # the sum over dim 0 has shape [3]
    assert status(src, [2], tensor(good, float32)) != 0  # rank 2: dimension 2 is out of range
    assert status(src, [0], tensor(good, float32), dtype=int64) != 0  # dtype differs from out's
