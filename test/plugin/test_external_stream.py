"""torch_npu_ipc.ExternalStream over streams another library made with raw ``aclrtCreateStream``.

The "other library" is plain ctypes ACL: it creates the stream (on a helper
thread, so the pytest thread's current device, which torch_npu owns, does not
change), allocates its own device memory, and queues its own work on the
stream (``aclrtMemcpyAsync``, simulated device time with ``aclsim.sleep``).
Every behaviour test runs on both implementations: ``native``
(torch_npu's getStreamFromExternal) and ``proxy`` (the entry point disabled,
as on a torch_npu without it).
"""

from __future__ import annotations

import ctypes
import threading
import time
import traceback
from collections.abc import Iterator

import pytest
import torch
import torch_npu

import aclsim
import torch_npu_ipc
from torch_npu_ipc import streams as ext_streams

WORK = 0.3  # seconds of simulated device work that ops must queue behind
D2D, H2D, D2H = 3, 1, 2

requires_aclsim = pytest.mark.skipif(not aclsim.is_active(), reason="needs aclsim (simulated device time)")


# ---------------------------------------------------------------- the other library
class OtherLib:
    """A foreign ACL user: its own streams and memory, raw ctypes calls."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libascendcl.so")
        vp, pvp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        sigs = {
            "aclrtSetDevice": [ctypes.c_int32],
            "aclrtCreateStream": [pvp],
            "aclrtDestroyStream": [vp],
            "aclrtSynchronizeStream": [vp],
            "aclrtMalloc": [pvp, ctypes.c_size_t, ctypes.c_int],
            "aclrtFree": [vp],
            "aclrtMemcpy": [vp, ctypes.c_size_t, vp, ctypes.c_size_t, ctypes.c_int],
            "aclrtMemcpyAsync": [vp, ctypes.c_size_t, vp, ctypes.c_size_t, ctypes.c_int, vp],
        }
        for name, args in sigs.items():
            getattr(lib, name).argtypes = args
            getattr(lib, name).restype = ctypes.c_int
        self.lib = lib

    def _on_device(self, device: int, fn) -> int:
        out: dict[str, object] = {}

        def run() -> None:
            try:
                assert self.lib.aclrtSetDevice(device) == 0
                out["v"] = fn()
            except BaseException as e:
                out["e"] = e

        t = threading.Thread(target=run)
        t.start()
        t.join(10)
        if "e" in out:
            raise out["e"]  # type: ignore[misc]
        return out["v"]  # type: ignore[return-value]

    def create_stream(self, device: int) -> int:
        def make() -> int:
            s = ctypes.c_void_p()
            assert self.lib.aclrtCreateStream(ctypes.byref(s)) == 0
            return s.value or 0

        return self._on_device(device, make)

    def destroy_stream(self, ptr: int) -> None:
        assert self.lib.aclrtSynchronizeStream(ptr) == 0
        assert self.lib.aclrtDestroyStream(ptr) == 0

    def device_buffer(self, device: int, data: bytes) -> int:
        def make() -> int:
            p = ctypes.c_void_p()
            assert self.lib.aclrtMalloc(ctypes.byref(p), len(data), 0) == 0
            buf = ctypes.create_string_buffer(data, len(data))
            assert self.lib.aclrtMemcpy(p, len(data), buf, len(data), H2D) == 0
            return p.value or 0

        return self._on_device(device, make)

    def copy_async(self, dst: int, src: int, n: int, kind: int, stream: int) -> None:
        assert self.lib.aclrtMemcpyAsync(dst, n, src, n, kind, stream) == 0

    def sync(self, stream: int) -> None:
        assert self.lib.aclrtSynchronizeStream(stream) == 0


@pytest.fixture(scope="module")
def other() -> OtherLib:
    return OtherLib()


@pytest.fixture(params=["native", "proxy"])
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with torch_npu's getStreamFromExternal, and with it disabled."""
    assert ext_streams._from_external is not None, "torch_npu 2.13 exports getStreamFromExternal"
    if request.param == "proxy":
        monkeypatch.setattr(ext_streams, "_from_external", None)
    return request.param


@pytest.fixture
def raw(other: OtherLib) -> Iterator[int]:
    torch.npu.set_device(0)
    ptr = other.create_stream(0)
    yield ptr
    other.destroy_stream(ptr)


def floats(t: torch.Tensor) -> list[float]:
    return t.cpu().tolist()


def made(t: torch.Tensor) -> torch.Tensor:
    """Wait until ``t``'s producing op (queued on the default stream) is done, then return it.

    Tensors are created on the default stream; another stream (the external
    one, its proxy, a side stream) that reads them without ordering races
    with the fill, exactly as on CUDA. The tests order them explicitly.
    """
    torch.npu.synchronize()
    return t


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("bad", [0, None])
def test_null_pointer_is_value_error(bad: object) -> None:
    with pytest.raises(ValueError, match="non-zero"):
        torch_npu_ipc.ExternalStream(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, -(2**63), 2**64])
def test_out_of_range_pointer_is_value_error(bad: int) -> None:
    with pytest.raises(ValueError):
        torch_npu_ipc.ExternalStream(bad)


@pytest.mark.parametrize("bad", [True, False, 1.5, "0x5a0000000020", b"\x01", ctypes.c_void_p(1)])
def test_non_integer_pointer_is_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="stream_ptr must be an int"):
        torch_npu_ipc.ExternalStream(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [{"priority": 0}, {"priority": -1}, {"is_sync_launch": False}])
def test_priority_and_sync_launch_are_value_errors(raw: int, kwargs: dict) -> None:
    with pytest.raises(ValueError, match="cannot be given for an ExternalStream"):
        torch_npu_ipc.ExternalStream(raw, **kwargs)


def test_unknown_keyword_is_type_error(raw: int) -> None:
    with pytest.raises(TypeError, match="unexpected keyword"):
        torch_npu_ipc.ExternalStream(raw, flags=1)


@pytest.mark.parametrize("device", [99, "cpu", torch.device("cpu"), -1])
def test_bad_device(raw: int, device: object) -> None:
    with pytest.raises(ValueError):
        torch_npu_ipc.ExternalStream(raw, device=device)  # type: ignore[arg-type]


@requires_aclsim
def test_forged_handle_is_rejected(impl: str) -> None:
    with pytest.raises(ValueError, match="not a live aclrtStream"):
        torch_npu_ipc.ExternalStream(0x1234_5670)


@requires_aclsim
def test_destroyed_stream_is_rejected_at_construction(impl: str, other: OtherLib) -> None:
    ptr = other.create_stream(0)
    other.destroy_stream(ptr)
    with pytest.raises(ValueError, match="not a live aclrtStream"):
        torch_npu_ipc.ExternalStream(ptr)


def test_second_device_for_a_wrapped_stream_is_rejected(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw, device=0)
    with pytest.raises(ValueError, match="already wrapped as an ExternalStream of npu:0"):
        torch_npu_ipc.ExternalStream(raw, device=1)
    del ext


# ---------------------------------------------------------------- identity
def test_is_a_torch_npu_stream_with_identity(impl: str, raw: int, other: OtherLib) -> None:
    a = torch_npu_ipc.ExternalStream(raw)
    b = torch_npu_ipc.ExternalStream(raw, device="npu:0")
    assert isinstance(a, torch_npu.npu.Stream) and isinstance(a, torch.npu.Stream)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a.stream_ptr == raw and a.device == torch.device("npu", 0)
    assert a.native is (impl == "native")
    assert ("proxy" in repr(a)) is (impl == "proxy")
    second = other.create_stream(0)
    try:
        c = torch_npu_ipc.ExternalStream(second)
        assert c != a and hash(c) != hash(a)
    finally:
        other.destroy_stream(second)
    assert a != torch.npu.current_stream()


def test_native_current_stream_names_the_foreign_stream(raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    assert ext.native and ext.npu_stream == raw
    with torch.npu.stream(ext):
        cur = torch.npu.current_stream()
        assert cur == ext and hash(cur) == hash(ext) and cur.npu_stream == raw
    torch.npu.set_stream(ext)
    try:
        assert torch.npu.current_stream().npu_stream == raw
    finally:
        torch.npu.set_stream(torch.npu.default_stream())


def test_device_is_respected(impl: str, other: OtherLib) -> None:
    torch.npu.set_device(0)
    ptr = other.create_stream(1)
    try:
        ext = torch_npu_ipc.ExternalStream(ptr, device=1)
        assert ext.device == torch.device("npu", 1) and ext.device_index == 1
        x = made(torch.arange(8, dtype=torch.float32, device="npu:1"))
        with torch.npu.device(1), torch.npu.stream(ext):
            y = x * 3
        ext.synchronize()
        assert floats(y) == [3.0 * i for i in range(8)]
    finally:
        other.destroy_stream(ptr)


# ------------------------------------------------------- ops and ordering
@requires_aclsim
def test_ops_run_on_the_stream_ordered_with_foreign_work(impl: str, raw: int, other: OtherLib) -> None:
    """Foreign copy into a tensor, then torch reads it on ext; torch writes, fence, foreign copies out."""
    n = 16
    src = other.device_buffer(0, torch.arange(n, dtype=torch.float32).add(100).numpy().tobytes())
    x = torch.zeros(n, device="npu:0")
    torch.npu.synchronize()
    aclsim.sleep(raw, WORK)  # the other library's slow work
    other.copy_async(x.data_ptr(), src, n * 4, D2D, raw)
    ext = torch_npu_ipc.ExternalStream(raw)  # proxy: its construction is a fence
    t = time.monotonic()
    with torch.npu.stream(ext):
        y = x * 2  # must see the copy, which waits for the sleep
        z = y + 1
    assert time.monotonic() - t < WORK / 2, "launching on the external stream blocked the host"
    # hand back to the other library: its copy out must see z
    ext.fence()
    out = made(torch.full((n,), -1.0, device="npu:0"))
    other.copy_async(out.data_ptr(), z.data_ptr(), n * 4, D2D, raw)
    other.sync(raw)
    assert time.monotonic() - t >= WORK - 0.02
    expect = [(100.0 + i) * 2 + 1 for i in range(n)]
    assert floats(out) == expect
    assert floats(z) == expect


def test_set_stream_runs_ops_on_it(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    x = made(torch.ones(4, device="npu:0"))
    torch.npu.set_stream(ext)
    try:
        y = x.add(1)
    finally:
        torch.npu.set_stream(torch.npu.default_stream())
    ext.synchronize()
    assert floats(y) == [2.0] * 4


# ------------------------------------------------- synchronize and query
@requires_aclsim
def test_synchronize_and_query(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    ext.synchronize()
    assert ext.query()
    x = made(torch.ones(1024, device="npu:0"))
    aclsim.sleep(raw, WORK)
    with torch.npu.stream(ext):
        y = x + 1
    assert not ext.query()
    t = time.monotonic()
    ext.synchronize()
    assert time.monotonic() - t >= WORK / 2
    assert ext.query()
    assert floats(y[:2]) == [2.0, 2.0]


# ---------------------------------------------------------------- events
@requires_aclsim
@pytest.mark.parametrize("interprocess", [False, True])
def test_event_recorded_on_ext_orders_a_torch_stream(impl: str, raw: int, interprocess: bool) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    x = made(torch.zeros(8, device="npu:0"))
    aclsim.sleep(raw, WORK)
    with torch.npu.stream(ext):
        x.add_(5)
    e = torch_npu_ipc.Event(interprocess=interprocess)
    e.record(ext)
    assert not e.query()
    s = torch.npu.Stream()
    e.wait(s)
    with torch.npu.stream(s):
        y = x * 2
    s.synchronize()
    assert e.query()
    assert floats(y) == [10.0] * 8


@requires_aclsim
def test_event_recorded_with_ext_current(impl: str, raw: int) -> None:
    """Event.record() without a stream inside torch.npu.stream(ext) records on ext."""
    ext = torch_npu_ipc.ExternalStream(raw)
    aclsim.sleep(raw, WORK)
    e = torch_npu_ipc.Event()
    with torch.npu.stream(ext):
        e.record(ext if impl == "proxy" else None)  # proxy: current_stream() is the proxy
    assert not e.query()
    e.synchronize()
    assert e.query()


@requires_aclsim
def test_timing_event_on_ext(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    start, end = torch_npu_ipc.Event(enable_timing=True), torch_npu_ipc.Event(enable_timing=True)
    start.record(ext)
    aclsim.sleep(raw, WORK)
    end.record(ext)
    end.synchronize()
    assert start.elapsed_time(end) >= WORK * 1000 * 0.9


@requires_aclsim
@pytest.mark.parametrize("kind", ["ipc_event", "plain_ipc_event_class", "torch_npu_event", "interprocess"])
def test_ext_waits_for_event(impl: str, raw: int, other: OtherLib, kind: str) -> None:
    """ext waits for work on a busy torch stream: torch ops and the other library's copy both see it."""
    s = torch.npu.Stream()
    x = made(torch.zeros(8, device="npu:0"))
    aclsim.sleep(s.npu_stream, WORK)
    with torch.npu.stream(s):
        x.add_(7)
    if kind == "torch_npu_event":
        e = torch.npu.Event()
        e.record(s)
    else:
        e = torch_npu_ipc.Event(interprocess=kind == "interprocess")
        e.record(s)
    ext = torch_npu_ipc.ExternalStream(raw)
    if kind == "plain_ipc_event_class":
        e.wait(ext)
    else:
        ext.wait_event(e)
    with torch.npu.stream(ext):
        y = x + 1
    ext.fence()
    out = made(torch.zeros(8, device="npu:0"))
    other.copy_async(out.data_ptr(), x.data_ptr(), 32, D2D, raw)
    ext.synchronize()
    assert floats(y) == [8.0] * 8
    assert floats(out) == [7.0] * 8


@requires_aclsim
def test_wait_stream_both_ways(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    s = torch.npu.Stream()
    x = made(torch.zeros(8, device="npu:0"))
    aclsim.sleep(raw, WORK)
    with torch.npu.stream(ext):
        x.add_(1)
    s.wait_stream(ext)  # ext.record_event() under the hood
    with torch.npu.stream(s):
        x.mul_(3)
    aclsim.sleep(s.npu_stream, WORK)
    ext.wait_stream(s)
    with torch.npu.stream(ext):
        y = x + 1
    ext.synchronize()
    assert floats(y) == [4.0] * 8
    ev = ext.record_event()
    assert isinstance(ev, torch_npu_ipc.Event)
    plain = ext.record_event(torch.npu.Event())
    plain.synchronize()


def test_wait_on_never_recorded_event_is_a_no_op(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    ext.wait_event(torch_npu_ipc.Event())
    ext.wait_event(torch.npu.Event())
    ext.synchronize()


def test_event_of_another_device_cannot_be_recorded(raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    e = torch_npu_ipc.Event()
    e.record(torch.npu.default_stream(1))
    with pytest.raises(ValueError, match="belongs to npu:1"):
        e.record(ext)


# ---------------------------------------------------------------- guards
def test_record_stream_is_refused(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    x = torch.ones(4, device="npu:0")
    with pytest.raises(RuntimeError, match=r"record_stream.*not supported on an ExternalStream.*synchronize"):
        x.record_stream(ext)
    x.record_stream(torch.npu.Stream())  # other streams are untouched
    assert floats(x + 1) == [2.0] * 4


def test_graph_capture_is_refused(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    g = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match=r"graph capture on an ExternalStream is not supported.*wait_stream"):
        with torch.npu.graph(g, stream=ext):
            pass
    assert torch.npu.current_stream() == torch.npu.default_stream()
    if impl == "native":  # the proxy is an ordinary torch_npu stream once current
        with torch.npu.stream(ext), pytest.raises(RuntimeError, match="graph capture on an ExternalStream"):
            g.capture_begin()
    assert floats(torch.ones(2, device="npu:0") * 2) == [2.0, 2.0]


# ---------------------------------------------------------------- lifetime
def _use_after_destroy(mode: str, impl: str) -> None:
    """Worker: the owner destroys the stream; using the ExternalStream raises, nothing crashes."""
    try:
        _use_after_destroy_body(mode, impl)
    except BaseException:
        traceback.print_exc()  # shown with the failing test's captured output
        raise


def _use_after_destroy_body(mode: str, impl: str) -> None:
    import torch_npu_ipc
    from torch_npu_ipc import streams as s

    if impl == "proxy":
        s._from_external = None
    lib = OtherLib()
    torch.npu.set_device(0)
    ptr = lib.create_stream(0)
    ext = torch_npu_ipc.ExternalStream(ptr)
    x = torch.ones(4, device="npu:0")
    lib.destroy_stream(ptr)  # the owner is done with it; ext is now dangling
    with pytest.raises(RuntimeError):
        if mode == "synchronize":
            ext.synchronize()
        elif mode == "query":
            ext.query()
        elif mode == "record":
            torch_npu_ipc.Event().record(ext)
        elif mode == "fence":
            ext.fence()
            if ext.native:
                raise RuntimeError("fence has no ACL call on the native path")  # nothing to detect
        else:
            with torch.npu.stream(ext):
                y = x + 1
            y.cpu()
            torch.npu.synchronize()


@requires_aclsim
@pytest.mark.parametrize("mode", ["synchronize", "query", "record", "op", "fence"])
def test_use_after_owner_destroyed_raises(impl: str, mode: str) -> None:
    if mode == "op" and impl == "proxy":
        pytest.skip("on the proxy path torch ops run on the proxy, which stays alive")
    from helpers import run_processes

    run_processes([(_use_after_destroy, (mode, impl))], timeout=120)
