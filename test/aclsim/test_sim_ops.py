"""Device ops through aclsim's aclnn library, compared with the CPU.

An op aclsim does not implement must fail with a Python RuntimeError that
names it. That case runs in a subprocess: after a failed op torch_npu's
task queue stops running later ops, which would poison the pytest process.
"""

from __future__ import annotations

import os
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


@pytest.mark.devices(4)
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


LAUNCH_COST = r"""
import time
import torch, torch_npu
x = torch.zeros(8, device="npu:0")
torch.npu.synchronize()
t0 = time.perf_counter()
for _ in range(10):
    x.add_(1)
launched = time.perf_counter() - t0
torch.npu.synchronize()
print(launched, time.perf_counter() - t0, x.sum().item())
"""


@pytest.mark.mode_independent
@pytest.mark.parametrize("mode", ["0", "1"])
def test_launch_cost_holds_the_launching_thread(mode: str) -> None:
    """ACLSIM_LAUNCH_COST_US holds the thread that launches: the caller in mode 0, torch_npu's queue thread in 1."""
    env = {**os.environ, "ACLSIM_LAUNCH_COST_US": "20000", "TASK_QUEUE_ENABLE": mode}
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCH_COST], env=env, check=False, capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    launched, drained, total = (float(v) for v in proc.stdout.split())
    assert total == 80.0, f"the launches ran out of order or not at all: sum {total}"
    assert drained >= 10 * 0.02, f"ten launches of 20 ms each took {drained:.3f} s"
    if mode == "0":
        assert launched >= 10 * 0.02, f"the caller launched ten ops in {launched:.3f} s"
    else:
        assert launched < drained / 2, f"the caller waited for the queue thread: {launched:.3f} of {drained:.3f} s"


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


class _OpApi:
    """Calls libopapi.so's first phases directly, to see what they refuse."""

    FLOAT32, INT64, BOOL = 0, 9, 12  # aclDataType

    def __init__(self) -> None:
        import ctypes

        import aclsim

        self.ct = ctypes
        self.lib = ctypes.CDLL(str(aclsim.lib_dir() / "libopapi.so"))
        i64p = ctypes.POINTER(ctypes.c_int64)
        self.lib.aclCreateTensor.restype = ctypes.c_void_p
        self.lib.aclCreateTensor.argtypes = [i64p, ctypes.c_uint64, ctypes.c_int, i64p, ctypes.c_int64, ctypes.c_int]
        self.lib.aclCreateTensor.argtypes += [i64p, ctypes.c_uint64, ctypes.c_void_p]
        self.lib.aclCreateIntArray.restype = ctypes.c_void_p
        self.lib.aclCreateIntArray.argtypes = [i64p, ctypes.c_uint64]
        self.lib.aclCreateTensorList.restype = ctypes.c_void_p
        self.lib.aclCreateTensorList.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64]
        self.keep: list[object] = []

    def tensor(self, t: torch.Tensor, dtype: int) -> int:
        """An aclTensor describing the device tensor `t` as `dtype`."""
        ct = self.ct
        dims = (ct.c_int64 * t.dim())(*t.shape)
        strides = (ct.c_int64 * t.dim())(*t.stride())
        storage = (ct.c_int64 * 1)(t.numel())
        self.keep.extend((dims, strides, storage))
        return self.lib.aclCreateTensor(dims, t.dim(), dtype, strides, 0, 2, storage, 1, t.data_ptr())

    def int_array(self, values: list[int]) -> int:
        arr = (self.ct.c_int64 * len(values))(*values)
        self.keep.append(arr)
        return self.lib.aclCreateIntArray(arr, len(values))

    def tensor_list(self, tensors: list[int]) -> int:
        arr = (self.ct.c_void_p * len(tensors))(*tensors)
        return self.lib.aclCreateTensorList(arr, len(tensors))

    def status(self, op: str, *args: object) -> int:
        """The aclnnStatus of `op`'s first phase for `args`: pointers, small ints, floats (double) and bools."""
        ct = self.ct
        fn = getattr(self.lib, op + "GetWorkspaceSize")

        def ctype(a: object) -> object:
            if isinstance(a, bool):
                return ct.c_bool
            if isinstance(a, float):
                return ct.c_double
            return ct.c_int64 if 0 <= a <= 255 else ct.c_void_p  # type: ignore[operator]  # small ints: dims, dtypes

        fn.argtypes = [ctype(a) for a in args]
        fn.argtypes += [ct.POINTER(ct.c_uint64), ct.POINTER(ct.c_void_p)]
        ws, ex = ct.c_uint64(), ct.c_void_p()
        return fn(*args, ct.byref(ws), ct.byref(ex))


def test_reduce_sum_refuses_bad_arguments() -> None:
    """aclnnReduceSum's first phase refuses an out of the wrong shape or dtype and a dimension out of range."""
    api = _OpApi()
    lib, ct = api.lib, api.ct
    lib.aclnnReduceSumGetWorkspaceSize.argtypes = [ct.c_void_p, ct.c_void_p, ct.c_bool, ct.c_int]
    lib.aclnnReduceSumGetWorkspaceSize.argtypes += [ct.c_void_p, ct.POINTER(ct.c_uint64), ct.POINTER(ct.c_void_p)]

    def status(src: int, dims: list[int], out: int, dtype: int = api.FLOAT32) -> int:
        ws, ex = ct.c_uint64(), ct.c_void_p()
        return lib.aclnnReduceSumGetWorkspaceSize(
            src, api.int_array(dims), False, dtype, out, ct.byref(ws), ct.byref(ex)
        )

    x = torch.zeros(2, 3, device=DEVICE)
    good, bad = torch.zeros(3, device=DEVICE), torch.zeros(2, device=DEVICE)
    src = api.tensor(x, api.FLOAT32)
    assert status(src, [0], api.tensor(good, api.FLOAT32)) == 0
    assert status(src, [0], api.tensor(bad, api.FLOAT32)) != 0  # the sum over dim 0 has shape [3]
    assert status(src, [2], api.tensor(good, api.FLOAT32)) != 0  # rank 2: dimension 2 is out of range
    assert status(src, [0], api.tensor(good, api.FLOAT32), dtype=api.INT64) != 0  # dtype differs from out's


def test_new_ops_refuse_bad_arguments() -> None:
    """The first phases of the printing ops refuse what PyTorch refuses, with a status, not a crash."""
    api = _OpApi()
    f32, b8 = api.FLOAT32, api.BOOL
    x = torch.zeros(2, 3, device=DEVICE)
    flags = torch.zeros(2, 3, dtype=torch.bool, device=DEVICE)
    six, five = torch.zeros(6, device=DEVICE), torch.zeros(5, device=DEVICE)
    assert api.status("aclnnMaskedSelect", api.tensor(x, f32), api.tensor(flags, b8), api.tensor(six, f32)) == 0
    assert api.status("aclnnMaskedSelect", api.tensor(x, f32), api.tensor(flags, b8), api.tensor(five, f32)) != 0
    assert api.status("aclnnMaskedSelect", api.tensor(x, f32), api.tensor(x, f32), api.tensor(six, f32)) != 0
    assert api.status("aclnnBitwiseAndTensor", api.tensor(x, f32), api.tensor(x, f32), api.tensor(x, f32)) != 0
    assert api.status("aclnnBitwiseAndTensor", api.tensor(flags, b8), api.tensor(flags, b8), api.tensor(flags, b8)) == 0
    assert api.status("aclnnAbs", api.tensor(flags, b8), api.tensor(flags, b8)) != 0
    assert api.status("aclnnAbs", api.tensor(x, f32), api.tensor(six, f32)) != 0  # shapes differ
    assert api.status("aclnnMax", api.tensor(x[:0], f32), api.tensor(x[0, 0], f32)) != 0  # nothing to reduce
    assert api.status("aclnnMax", api.tensor(x, f32), api.tensor(x[0, 0], f32)) == 0
    pair = torch.zeros(2, 2, 3, device=DEVICE)
    assert api.status("aclnnStack", api.tensor_list([api.tensor(x, f32)] * 2), 0, api.tensor(pair, f32)) == 0
    wrong = api.tensor_list([api.tensor(x, f32), api.tensor(six, f32)])
    assert api.status("aclnnStack", wrong, 0, api.tensor(pair, f32)) != 0
    assert api.status("aclnnCat", api.tensor_list([api.tensor(x, f32)]), 5, api.tensor(x, f32)) != 0  # dim
    assert api.status("aclnnCat", api.tensor_list([api.tensor(x, f32)]), 0, api.tensor(x, f32)) != 0  # overlap
    scalar, i64 = torch.zeros((), device=DEVICE), torch.zeros((), dtype=torch.int64, device=DEVICE)
    dims = api.int_array([])
    assert api.status("aclnnMean", api.tensor(x, f32), dims, False, f32, api.tensor(scalar, f32)) == 0
    assert api.status("aclnnMean", api.tensor(x, f32), dims, False, api.INT64, api.tensor(i64, api.INT64)) != 0
    assert api.status("aclnnAll", api.tensor(x, f32), dims, False, api.tensor(scalar, f32)) != 0  # out not bool
    assert (
        api.status("aclnnIsClose", api.tensor(x, f32), api.tensor(x, f32), 1e-5, 1e-8, False, api.tensor(flags, b8))
        == 0
    )
    assert (
        api.status("aclnnIsClose", api.tensor(x, f32), api.tensor(x, f32), -1.0, 1e-8, False, api.tensor(flags, b8))
        != 0
    )
    assert api.status("aclnnNeg", api.tensor(flags, b8), api.tensor(flags, b8)) != 0


def _sample(dtype: torch.dtype) -> torch.Tensor:
    """A 3x4 tensor of `dtype` with negatives, zeros and, for floats, -0.0, NaN and infinities."""
    if dtype == torch.bool:
        return torch.tensor([[True, False, True, False]] * 3)
    if dtype == torch.uint8:
        return torch.tensor([[0, 1, 7, 200], [255, 3, 0, 9], [4, 4, 128, 1]], dtype=dtype)
    base = torch.tensor([[-3, -1, 0, 2], [5, -7, 1, 0], [2, 2, -4, 6]], dtype=dtype)
    if dtype.is_floating_point:
        base = base / 2
        base[0, 2] = -0.0
        base[1, 3] = float("nan")
        base[2, 0] = float("inf")
        base[2, 1] = float("-inf")
    return base


COMPARES = ["eq", "ne", "lt", "le", "gt", "ge"]


@pytest.mark.parametrize("name", COMPARES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8], ids=str)
def test_comparisons_match_cpu(name: str, dtype: torch.dtype) -> None:
    """The Eq/Ne/Lt/Le/Gt/Ge families (Tensor, Scalar, Inplace*): the CPU's values, NaN included."""
    a = _sample(dtype)
    b = a.flip(1)
    row = a[1:2]  # broadcasts over the rows
    da, db, drow = a.to(DEVICE), b.to(DEVICE), row.to(DEVICE)
    fn = getattr(torch, name)
    assert torch.equal(fn(da, db).cpu(), fn(a, b))
    assert torch.equal(fn(da, drow).cpu(), fn(a, row))
    assert torch.equal(fn(da, 1).cpu(), fn(a, 1))
    assert torch.equal(fn(da, 0.5).cpu(), fn(a, 0.5))
    assert torch.equal(fn(da.t(), db.t()).cpu(), fn(a.t(), b.t()))  # strided inputs
    cpu, dev = a.clone(), a.to(DEVICE)
    getattr(cpu, name + "_")(b)
    getattr(dev, name + "_")(db)
    assert torch.equal(dev.cpu(), cpu)
    cpu, dev = a.clone(), a.to(DEVICE)
    getattr(cpu, name + "_")(1)
    getattr(dev, name + "_")(1)
    assert torch.equal(dev.cpu(), cpu)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int64], ids=str
)
def test_abs_ceil_isfinite_match_cpu(dtype: torch.dtype) -> None:
    """aclnnAbs, aclnnCeil, aclnnInplaceCeil, aclnnIsFinite: the CPU's values, dtypes and special values."""
    a = _sample(dtype)
    if dtype == torch.int8:
        a[0, 0] = -128  # abs wraps, as on the CPU
    d = a.to(DEVICE)
    for fn in (torch.abs, torch.isfinite):
        got, want = fn(d).cpu(), fn(a)
        assert got.dtype == want.dtype
        assert torch.equal(got, want) or torch.allclose(got, want, equal_nan=True), fn
    if dtype.is_floating_point:
        got, want = torch.ceil(d).cpu(), torch.ceil(a)
        assert torch.allclose(got, want, equal_nan=True)
        numbers = ~want.isnan()  # a NaN's sign bit means nothing
        assert torch.equal(torch.signbit(got)[numbers], torch.signbit(want)[numbers])  # -0.0 stays -0.0
        cpu, dev = (a / 3).clone(), (a / 3).to(DEVICE)
        cpu.ceil_()
        dev.ceil_()
        assert torch.allclose(dev.cpu(), cpu, equal_nan=True)
    cpu, dev = a.clone(), a.to(DEVICE)
    cpu.abs_()
    dev.abs_()
    assert torch.allclose(dev.cpu().double(), cpu.double(), equal_nan=True)
    assert torch.equal(torch.abs(d.t()).cpu().isnan(), torch.abs(a.t()).isnan())


@pytest.mark.parametrize("op", ["and", "or", "xor"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64], ids=str)
def test_bitwise_ops_match_cpu(op: str, dtype: torch.dtype) -> None:
    """The BitwiseAnd/Or/Xor families: tensor, broadcast row, scalar and in-place, integral and bool."""
    a = _sample(dtype)
    b = a.flip(0)
    row = a[2:3]
    da, db, drow = a.to(DEVICE), b.to(DEVICE), row.to(DEVICE)
    fn = getattr(torch, "bitwise_" + op)
    assert torch.equal(fn(da, db).cpu(), fn(a, b))
    assert torch.equal(fn(da, drow).cpu(), fn(a, row))
    scalar = True if dtype == torch.bool else 6
    assert torch.equal(fn(da, scalar).cpu(), fn(a, scalar))
    cpu, dev = a.clone(), a.to(DEVICE)
    getattr(cpu, "bitwise_" + op + "_")(b)
    getattr(dev, "bitwise_" + op + "_")(db)
    assert torch.equal(dev.cpu(), cpu)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.float64, torch.int64, torch.uint8, torch.bool], ids=str
)
def test_max_min_of_all_elements_match_cpu(dtype: torch.dtype) -> None:
    """Tensor.max() / Tensor.min() (aclnnMax, aclnnMin): the CPU's value and dtype; NaN wins."""
    a = _sample(dtype)
    if dtype.is_floating_point:
        a[1, 3] = 0.25  # no NaN: the extremes are the infinities
        b = a[:, 1:3]  # strided, finite
        for t in (a, b, a[0, 0]):
            assert torch.equal(t.to(DEVICE).max().cpu(), t.max())
            assert torch.equal(t.to(DEVICE).min().cpu(), t.min())
        a[1, 3] = float("nan")
        assert a.to(DEVICE).max().cpu().isnan() and a.to(DEVICE).min().cpu().isnan()
    else:
        for t in (a, a.t(), a[1:, 2:]):
            got_max, got_min = t.to(DEVICE).max().cpu(), t.to(DEVICE).min().cpu()
            assert got_max.dtype == dtype and torch.equal(got_max, t.max())
            assert torch.equal(got_min, t.min())


def test_masked_select_matches_cpu() -> None:
    """torch.masked_select (aclnnMaskedSelect + aclGetViewShape): size, order and values as on the CPU."""
    a = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    d = a.to(DEVICE)
    masks = {
        "some": a % 3 == 1,
        "none": torch.zeros(4, 6, dtype=torch.bool),
        "all": torch.ones(4, 6, dtype=torch.bool),
        "broadcast_row": torch.tensor([True, False, True, True, False, False]),
    }
    for name, mask in masks.items():
        got = torch.masked_select(d, mask.to(DEVICE)).cpu()
        assert torch.equal(got, torch.masked_select(a, mask)), name
        got_t = torch.masked_select(d.t(), mask.t().to(DEVICE) if mask.dim() == 2 else mask[:4].to(DEVICE)).cpu()
        want_t = torch.masked_select(a.t(), mask.t() if mask.dim() == 2 else mask[:4])
        assert torch.equal(got_t, want_t), name + " (strided)"
    ints = torch.arange(10, dtype=torch.int64)
    assert torch.equal(torch.masked_select(ints.to(DEVICE), ints.to(DEVICE) > 6).cpu(), ints[ints > 6])


def test_cat_and_stack_match_cpu() -> None:
    """torch.cat / torch.stack (aclnnCat, aclnnStack): dims, negative dims, strided and mixed-dtype inputs."""
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    b = torch.arange(100, 112, dtype=torch.float32).reshape(3, 4)
    h = torch.arange(8, dtype=torch.float16).reshape(2, 4)
    da, db, dh = a.to(DEVICE), b.to(DEVICE), h.to(DEVICE)
    for dim in (0, 1, -1):
        assert torch.equal(torch.cat([da, db], dim).cpu(), torch.cat([a, b], dim))
        assert torch.equal(torch.stack([da, db, da], dim).cpu(), torch.stack([a, b, a], dim))
    assert torch.equal(torch.stack([da, db], 2).cpu(), torch.stack([a, b], 2))
    assert torch.equal(torch.cat([da.t(), db.t()]).cpu(), torch.cat([a.t(), b.t()]))
    mixed = torch.cat([da, dh]).cpu()
    assert mixed.dtype == torch.float32 and torch.equal(mixed, torch.cat([a, h]))
    empty = torch.empty(0, device=DEVICE)
    assert torch.equal(torch.cat([da, empty, db]).cpu(), torch.cat([a, torch.empty(0), b]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool], ids=str)
def test_equal_isclose_allclose_match_cpu(dtype: torch.dtype) -> None:
    """torch.equal (aclnnEqual), isclose (aclnnIsClose) and allclose (isclose + all): the CPU's answers."""
    a = _sample(dtype)
    d = a.to(DEVICE)
    assert torch.equal(d, d.clone()) == torch.equal(a, a.clone())  # False for floats: NaN != NaN
    finite = a[:, :2] if dtype.is_floating_point else a
    df = finite.to(DEVICE)
    assert torch.equal(df, df.clone()) and torch.equal(df.t(), finite.t().contiguous().to(DEVICE))
    assert not torch.equal(df, df[:1])  # shapes differ
    if dtype != torch.bool:
        other = finite.clone()
        other.view(-1)[3] += 1
        assert not torch.equal(df, other.to(DEVICE))
    if dtype.is_floating_point:
        near = a + 1e-6 * a.abs()
        for kwargs in ({}, {"equal_nan": True}, {"rtol": 0.0, "atol": 0.0}, {"rtol": 0.1, "atol": 0.5}):
            got = torch.isclose(d, near.to(DEVICE), **kwargs).cpu()
            assert torch.equal(got, torch.isclose(a, near, **kwargs)), kwargs
        assert torch.allclose(df, finite.to(DEVICE) + 1e-7) == torch.allclose(finite, finite + 1e-7)
        assert not torch.allclose(df, finite.to(DEVICE) + 1)


REDUCTIONS = {
    "all": lambda t: t.all(),
    "any": lambda t: t.any(),
    "all_dim": lambda t: t.all(1),
    "any_dim_keepdim": lambda t: t.any(0, keepdim=True),
    "all_strided": lambda t: t.t().all(1),
    "all_empty": lambda t: t[:, :0].all(1),
    "any_empty": lambda t: t[:, :0].any(1),
}


@pytest.mark.parametrize("case", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8, torch.bool], ids=str)
def test_all_any_match_cpu(case: str, dtype: torch.dtype) -> None:
    """Tensor.all / Tensor.any (aclnnAll, aclnnAny): values (NaN and 0.5 are true), dtype and shape as on the CPU."""
    a = _sample(dtype)
    if dtype.is_floating_point:
        a[0, 1] = 0.5
    for t in (a, torch.ones_like(a), torch.zeros_like(a)):
        want = REDUCTIONS[case](t)
        got = REDUCTIONS[case](t.to(DEVICE)).cpu()
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_mean_and_neg_match_cpu(dtype: torch.dtype) -> None:
    """Tensor.mean (aclnnMean: all, dims, keepdim, dtype) and negation (aclnnNeg, in place too)."""
    a = (torch.arange(24) % 7 - 3).reshape(2, 3, 4).to(dtype)
    d = a.to(DEVICE)
    for fn in (
        lambda t: t.mean(),
        lambda t: t.mean(1),
        lambda t: t.mean((0, 2), keepdim=True),
        lambda t: t.transpose(0, 2).mean(-1),
        lambda t: t.mean(1, dtype=torch.float64),
        lambda t: -t,
        lambda t: t.transpose(1, 2).neg(),
    ):
        want, got = fn(a), fn(d).cpu()
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.allclose(got, want, rtol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6)
    assert torch.isnan(d[:, :0].mean(1).cpu()).all()  # the mean of nothing is NaN, as on the CPU
    ints = torch.tensor([5, -3, -(2**63)], dtype=torch.int64)
    assert torch.equal((-ints.to(DEVICE)).cpu(), -ints)  # wraps like the CPU
    assert torch.equal(ints.to(DEVICE).mean(dtype=torch.float64).cpu(), ints.mean(dtype=torch.float64))
    dev = d.clone()
    dev.neg_()
    assert torch.equal(dev.cpu(), -a)


PRINTED = {
    "float_fractions": lambda: torch.tensor([[0.5, -1.25, 3.0], [2.0, 0.0, -0.125]]),
    "float_integers": lambda: torch.arange(-3, 9, dtype=torch.float32).reshape(3, 4),
    "float_special": lambda: torch.tensor([1.5, float("nan"), float("inf"), -float("inf"), -0.0]),
    "float_sci": lambda: torch.tensor([1e-6, 3.5e9, 12.0]),
    "float_all_zero": lambda: torch.zeros(2, 3),
    "float_zero_dim": lambda: torch.tensor(2.75),
    "float_empty": lambda: torch.empty(0, 3),
    "float16": lambda: torch.tensor([0.1, 2.5, -7.0], dtype=torch.float16),
    "bfloat16": lambda: torch.tensor([0.1, 2.5, -7.0], dtype=torch.bfloat16),
    "float64": lambda: torch.tensor([1 / 3, 2.0], dtype=torch.float64),
    "summarized_1d": lambda: torch.arange(2000, dtype=torch.float32) / 7,
    "summarized_3d": lambda: torch.arange(24 * 50 * 3, dtype=torch.float32).reshape(24, 50, 3),
    "int64": lambda: torch.arange(-5, 5),
    "bool": lambda: torch.tensor([True, False]),
}


@pytest.mark.parametrize("case", sorted(PRINTED))
def test_print_of_a_device_tensor_matches_cpu(case: str) -> None:
    """repr/print of an NPU tensor works on aclsim and shows what the CPU tensor shows, plus the device."""
    cpu = PRINTED[case]()
    text = repr(cpu.to(DEVICE))
    assert "device='npu:0'" in text
    assert text.replace(", device='npu:0'", "").replace("device='npu:0', ", "") == repr(cpu)
