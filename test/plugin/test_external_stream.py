"""torch_npu_ipc.ExternalStream over streams another library made with raw ``aclrtCreateStream``.

The "other library" (`other_lib.OtherLib`) is plain ctypes ACL: it creates the stream (on a helper
thread, so the pytest thread's current device, which torch_npu owns, does not
change), allocates its own device memory, and queues its own work on the
stream (``aclrtMemcpyAsync``, simulated device time with ``aclsim.sleep``).
Every behaviour test runs on both implementations: ``native``
(torch_npu's getStreamFromExternal) and ``proxy`` (the entry point disabled,
as on a torch_npu without it).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch_npu
from other_lib import D2D, OtherLib

import aclsim
import torch_npu_ipc
from torch_npu_ipc import event_guard
from torch_npu_ipc import streams as ext_streams

WORK = 0.3  # seconds of simulated device work that ops must queue behind

requires_aclsim = pytest.mark.skipif(not aclsim.is_active(), reason="needs aclsim (simulated device time)")
NATIVE_REFUSED = (
    "torch_npu's per-stream task queue (PER_STREAM_QUEUE) refuses external streams, so the plugin uses the "
    "proxy there (test_per_stream_queue_selects_the_proxy)"
)
# torch_npu before 2.13 does not export getStreamFromExternal: there only the proxy exists.
NATIVE_ABSENT = (
    f"torch_npu {torch_npu.__version__} does not export c10_npu::getStreamFromExternal (2.13 and later do): "
    "ExternalStream is always the proxy here"
)
HAS_NATIVE = ext_streams._from_external is not None
requires_native = pytest.mark.skipif(
    not HAS_NATIVE or bool(ext_streams.per_stream_queue_refusal()),
    reason=NATIVE_ABSENT if not HAS_NATIVE else NATIVE_REFUSED,
)


@pytest.fixture(scope="module")
def other() -> OtherLib:
    return OtherLib()


@pytest.fixture(params=["native", "proxy"])
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with torch_npu's getStreamFromExternal, and with it disabled."""
    if request.param == "native" and not HAS_NATIVE:
        pytest.skip(NATIVE_ABSENT)
    if request.param == "native" and ext_streams.per_stream_queue_refusal():
        pytest.skip(NATIVE_REFUSED)
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
    ``torch.npu.synchronize()`` waits for the current device only: wait for
    the tensor's.
    """
    torch.npu.synchronize(t.device)
    return t


def _library_mtimes() -> dict[str, float]:
    """Modification times of the shared libraries a fresh process loads: the plugin's and aclsim's."""
    from torch_npu_ipc import _C

    paths = [Path(_C.__file__)]
    if aclsim.is_active():
        paths += sorted((Path(aclsim.__file__).resolve().parent / "lib").glob("*.so"))
    out = {}
    for p in paths:
        with contextlib.suppress(OSError):
            out[str(p)] = p.stat().st_mtime
    return out


_SESSION_LIBRARIES = _library_mtimes()


@contextlib.contextmanager
def _rebuilt_libraries_noted() -> Iterator[None]:
    """A worker that fails to start because the libraries were rebuilt meanwhile: say so in the failure."""
    try:
        yield
    except AssertionError as e:
        changed = sorted(p for p, t in _library_mtimes().items() if _SESSION_LIBRARIES.get(p) != t)
        if changed:
            raise AssertionError(
                f"{e}\n(note: rebuilt during this test session, so a fresh worker may have loaded a "
                f"half-written or mismatched library: {', '.join(changed)})"
            ) from e
        raise


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


@pytest.mark.devices(2)
def test_second_device_for_a_wrapped_stream_is_rejected(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw, device=0)
    with pytest.raises(ValueError, match="already wrapped as an ExternalStream of npu:0"):
        torch_npu_ipc.ExternalStream(raw, device=1)
    del ext


@pytest.mark.devices(2)
def test_second_device_is_rejected_while_any_wrapper_lives(impl: str, raw: int) -> None:
    """Dropping a later wrapper of the pointer does not forget the earlier one's device."""
    first = torch_npu_ipc.ExternalStream(raw, device=0)
    later = torch_npu_ipc.ExternalStream(raw, device=0)
    del later
    gc.collect()
    with pytest.raises(ValueError, match="already wrapped as an ExternalStream of npu:0"):
        torch_npu_ipc.ExternalStream(raw, device=1)
    del first
    gc.collect()
    assert raw not in {ptr for ptr, live in ext_streams._LIVE.items() if live}


def test_rewrapping_a_pointer_reuses_its_entries(impl: str, other: OtherLib) -> None:
    """Wrapping the same pointer again adds no bookkeeping; each new pointer adds one entry (docs: Lifetime rule)."""
    table = ext_streams._NATIVE_IDS if impl == "native" else ext_streams._PROXIES
    torch.npu.set_device(0)
    ptrs = [other.create_stream(0) for _ in range(3)]
    try:
        before = len(table)
        # On hardware a new stream may take the address of one an earlier test destroyed (aclsim never reuses).
        known = {e.ptr for e in table.values()} if impl == "native" else {key[1] for key in table}
        new = len(set(ptrs) - known)
        for ptr in ptrs:
            ext = torch_npu_ipc.ExternalStream(ptr, device=0)
            with torch.npu.stream(ext):
                torch.ones(4, device="npu:0").add_(1)
            ext.synchronize()
        assert len(table) == before + new, (before, new, len(table))
        for _ in range(200):
            for ptr in ptrs:
                ext = torch_npu_ipc.ExternalStream(ptr, device=0)
                del ext
        gc.collect()
        assert len(table) == before + new, (before, new, len(table))
    finally:
        for ptr in ptrs:
            other.destroy_stream(ptr)


@requires_aclsim
def test_probe_records_without_waiting_for_the_stream(impl: str, raw: int) -> None:
    """Construction probes the stream (aclrtStreamQuery, then an event record) without waiting for its work."""
    aclsim.sleep(raw, WORK)
    t = time.monotonic()
    ext = torch_npu_ipc.ExternalStream(raw)
    assert time.monotonic() - t < WORK / 2, "constructing an ExternalStream waited for the foreign stream"
    assert not ext.query()
    ext.synchronize()


def test_idle_stream_queries_done_right_after_construction(impl: str, other: OtherLib) -> None:
    """What the constructor queues on an idle stream (its probe, the proxy's fence) has run when it returns.

    Before, ``query()`` right after construction was False about every other time with
    ``TASK_QUEUE_ENABLE=1``, and always on the proxy path, where torch.cuda says True.
    """
    torch.npu.set_device(0)
    for _ in range(20):
        ptr = other.create_stream(0)
        try:
            assert torch_npu_ipc.ExternalStream(ptr).query(), "an idle stream queried busy after construction"
        finally:
            other.destroy_stream(ptr)


@pytest.mark.devices(2)
def test_stream_of_another_device_is_rejected(impl: str, other: OtherLib) -> None:
    """A stream created on npu:1 wrapped as npu:0: ValueError naming both, where the runtime refuses it.

    CANN, and aclsim like it, refuses work (aclrtRecordEvent) on a stream of
    another device's context with ACL_ERROR_RT_STREAM_CONTEXT (107003); the
    constructor then finds the stream's device (see docs/external_stream.md).
    """
    torch.npu.set_device(0)
    ptr = other.create_stream(1)
    try:
        problem, other_context = ext_streams._C._ext_probe(ptr, 0)
        assert problem and other_context, "the runtime (CANN, aclsim) refuses work on a stream of another device"
        assert "107003" in problem, problem
        with pytest.raises(ValueError, match=r"is a stream of npu:1, not of npu:0.*Pass device=1"):
            torch_npu_ipc.ExternalStream(ptr, device=0)
    finally:
        other.destroy_stream(ptr)


@pytest.mark.parametrize("owner", [1, -1])
def test_wrong_device_error_names_the_devices(raw: int, monkeypatch: pytest.MonkeyPatch, owner: int) -> None:
    """The error path when the runtime refuses the stream as another context's (ACL error 107003), faked."""
    refusal = "aclrtRecordEvent failed with ACL error 107003: stream not in current context"
    calls: list[tuple[int, int]] = []

    def probe(ptr: int, device: int) -> tuple[str, bool]:
        calls.append((ptr, device))
        return refusal, True

    monkeypatch.setattr(ext_streams._C, "_ext_probe", probe)
    monkeypatch.setattr(ext_streams._C, "_ext_stream_device", lambda ptr, except_device: owner)
    with pytest.raises(ValueError) as info:
        torch_npu_ipc.ExternalStream(raw, device=0)
    msg = str(info.value)
    assert f"{raw:#x}" in msg and "107003" in msg and "npu:0" in msg
    if owner == 1:
        assert "is a stream of npu:1, not of npu:0" in msg and "Pass device=1" in msg
    else:
        assert "another device or context than npu:0" in msg and "aclrtCreateContext" in msg
    assert calls == [(raw, 0)]


def test_probe_reports_a_rejected_handle(other: OtherLib) -> None:
    ptr = other.create_stream(0)
    assert ext_streams._C._ext_probe(ptr, 0) == ("", False)
    other.destroy_stream(ptr)
    if aclsim.is_active():
        problem, other_context = ext_streams._C._ext_probe(ptr, 0)
        assert problem.startswith("aclrtStreamQuery failed") and not other_context


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
    # != is the negation of == for every pair, also where a proxy (a pool stream) is shared: with `a` current,
    # the current stream is `a` itself (native) or its proxy (proxy path), and a torch_npu stream made on the
    # proxy's ids equals the proxy but not `a`.
    with torch.npu.stream(a):
        cur = torch.npu.current_stream()
    same_ids = torch_npu.npu.Stream(stream_id=a.stream_id, device_index=0, device_type=a.device_type)
    for x, y in ((a, cur), (cur, a), (a, same_ids), (a, b), (a, c), (c, a)):
        assert (x != y) is (not (x == y)), (x, y)


@requires_native
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


@pytest.mark.devices(2)
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


@pytest.mark.devices(2)
def test_device_defaults_to_the_current_one(impl: str, other: OtherLib) -> None:
    ptr = other.create_stream(1)
    try:
        with torch.npu.device(1):
            ext = torch_npu_ipc.ExternalStream(ptr)
        assert ext.device == torch.device("npu", 1)
        assert ext == torch_npu_ipc.ExternalStream(ptr, device="npu:1")
        ext.synchronize()
    finally:
        torch.npu.set_device(0)
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


@requires_aclsim
def test_fence_orders_torch_after_foreign_work_queued_later(impl: str, raw: int, other: OtherLib) -> None:
    """Foreign work queued after construction: fence(), then torch reads its result on ext.

    On the proxy path only the fence orders the proxy after that work (the
    docs' interop example hands over this way); on the native path queue
    order does too. Slow foreign work makes a missing wait visible.
    """
    n = 16
    src = other.device_buffer(0, torch.arange(n, dtype=torch.float32).add(7).numpy().tobytes())
    x = torch.zeros(n, device="npu:0")
    ext = torch_npu_ipc.ExternalStream(raw)
    torch.npu.synchronize()
    aclsim.sleep(raw, WORK)  # the other library's slow work, after construction
    other.copy_async(x.data_ptr(), src, n * 4, D2D, raw)
    t = time.monotonic()
    ext.fence()
    with torch.npu.stream(ext):
        y = x * 3
    assert time.monotonic() - t < WORK / 2, "fence() or the launch blocked the host"
    ext.synchronize()
    assert floats(y) == [(7.0 + i) * 3 for i in range(n)]


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
def new_event(kind: str) -> torch_npu.npu.Event:
    """An event of ``kind``: torch_npu's own class, or the plugin's (interprocess or not)."""
    if kind == "torch_npu_event":
        return torch.npu.Event()
    return torch_npu_ipc.Event(interprocess=kind == "interprocess")


@requires_aclsim
@pytest.mark.parametrize("kind", ["event", "interprocess", "torch_npu_event"])
def test_event_recorded_on_ext_orders_a_torch_stream(impl: str, raw: int, kind: str) -> None:
    """An event recorded on ext follows the owner's work queued there (torch_npu's Event.record(ext) too)."""
    ext = torch_npu_ipc.ExternalStream(raw)
    x = made(torch.zeros(8, device="npu:0"))
    aclsim.sleep(raw, WORK)
    with torch.npu.stream(ext):
        x.add_(5)
    e = new_event(kind)
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
@pytest.mark.parametrize("kind", ["event", "torch_npu_event"])
def test_event_recorded_with_ext_current(impl: str, raw: int, kind: str) -> None:
    """Event.record() without a stream inside torch.npu.stream(ext) records on ext."""
    ext = torch_npu_ipc.ExternalStream(raw)
    aclsim.sleep(raw, WORK)
    e = new_event(kind)
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
    start.synchronize()  # aclsim stamps a record when it runs: a late run would shorten the interval
    aclsim.sleep(raw, WORK)
    end.record(ext)
    end.synchronize()
    assert start.elapsed_time(end) >= WORK * 1000 * 0.9


@requires_aclsim
@pytest.mark.parametrize(
    "kind", ["ipc_event", "plain_ipc_event_class", "torch_npu_event", "torch_npu_event_wait", "interprocess"]
)
def test_ext_waits_for_event(impl: str, raw: int, other: OtherLib, kind: str) -> None:
    """ext waits for work on a busy torch stream: torch ops and the other library's copy both see it.

    ``*_wait`` / ``plain_ipc_event_class``: ``e.wait(ext)``, the others ``ext.wait_event(e)``.
    """
    s = torch.npu.Stream()
    x = made(torch.zeros(8, device="npu:0"))
    aclsim.sleep(s.npu_stream, WORK)
    with torch.npu.stream(s):
        x.add_(7)
    e = new_event("torch_npu_event" if kind.startswith("torch_npu_event") else kind)
    e.record(s)
    ext = torch_npu_ipc.ExternalStream(raw)
    if kind in ("plain_ipc_event_class", "torch_npu_event_wait"):
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
@pytest.mark.parametrize("direction", ["record", "wait"])
def test_torch_event_on_ext_is_ordered_with_the_owner(impl: str, raw: int, other: OtherLib, direction: str) -> None:
    """c10's device-generic ``torch.Event`` recorded on ext / waited for by ext, around the library's own work.

    On the proxy path it used the proxy alone (through c10's device guard, which the plugin's
    ``torch.npu.Event`` wrapper does not see): a consumer read the library's output before the library wrote
    it, and the library read a tensor before torch's write it waited for. torch_npu refuses it on its native
    external streams.
    """
    if impl == "proxy" and not event_guard.status()["wrapped"]:
        pytest.skip(
            "the plugin's device-guard wrapper is not installed (a torch older than 2.13, or "
            "TORCH_NPU_IPC_EVENT_GUARD=0): torch.Event on a proxy stays unordered there (docs/external_stream.md)"
        )
    ext = torch_npu_ipc.ExternalStream(raw)
    e = torch.Event(device="npu:0")
    s = torch.npu.Stream()
    x = made(torch.zeros(8, device="npu:0"))
    if direction == "record":
        src = made(torch.full((8,), 42.0, device="npu:0"))
        aclsim.sleep(raw, WORK)
        other.copy_async(x.data_ptr(), src.data_ptr(), 32, D2D, raw)  # the library's write, behind its slow work
        if impl == "native":
            with pytest.raises(RuntimeError, match="External NPU stream is not supported"):
                e.record(ext)
            ext.synchronize()
            return
        e.record(ext)
        e.wait(s)
        with torch.npu.stream(s):
            y = x.clone()
        s.synchronize()
        assert floats(y) == [42.0] * 8, "the event recorded on ext ran before the library's write"
    else:
        out = made(torch.zeros(8, device="npu:0"))
        aclsim.sleep(s.npu_stream, WORK)
        with torch.npu.stream(s):
            x.fill_(7.0)  # torch's write, behind slow work
        e.record(s)
        if impl == "native":
            with pytest.raises(RuntimeError, match="External NPU stream is not supported"):
                e.wait(ext)
            s.synchronize()
            return
        e.wait(ext)
        other.copy_async(out.data_ptr(), x.data_ptr(), 32, D2D, raw)  # the library's read, after the wait
        ext.synchronize()
        assert floats(out) == [7.0] * 8, "the library read before the write ext waited for"


@requires_aclsim
def test_a_proxys_pool_stream_outlives_a_destroyed_foreign_stream(
    other: OtherLib, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner destroys a stream whose (unused) ExternalStream is still alive; the proxy is a pool stream.

    torch streams sharing that pool stream keep working with c10 events (which the plugin orders with the
    foreign streams of a proxy): a foreign stream that is gone has nothing left to order with. Once the
    ExternalStream is collected, the plugin forgets the pointer.
    """
    monkeypatch.setattr(ext_streams, "_from_external", None)
    torch.npu.set_device(0)
    ptr = other.create_stream(0)
    ext = torch_npu_ipc.ExternalStream(ptr)
    shared = torch_npu.npu.Stream(stream_id=ext.stream_id, device_index=0, device_type=ext.device_type)
    other.destroy_stream(ptr)

    def events_on_shared() -> None:
        e = torch.Event(device="npu:0")
        e.record(shared)
        e.wait(shared)
        e.synchronize()

    events_on_shared()
    del ext
    gc.collect()
    events_on_shared()  # the pointer forgotten


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


@pytest.mark.devices(2)
@pytest.mark.parametrize("interprocess", [False, True])
def test_event_of_another_device_cannot_be_recorded(impl: str, raw: int, interprocess: bool) -> None:
    """The same ValueError on both paths, raised before anything is issued."""
    ext = torch_npu_ipc.ExternalStream(raw)
    e = torch_npu_ipc.Event(interprocess=interprocess)
    torch.zeros(1, device="npu:1")  # npu:1's streams exist (torch_npu's per-stream queue makes them lazily)
    e.record(torch.npu.default_stream(1))
    with pytest.raises(ValueError, match="belongs to npu:1"):
        e.record(ext)
    ext.synchronize()  # the stream is still usable


# ---------------------------------------------------------------- guards
@pytest.mark.parametrize("bad", [3, "x", object()])
def test_event_and_stream_arguments_of_a_wrong_type(impl: str, raw: int, bad: object) -> None:
    """record_event / wait_event / wait_stream name the type they take (before: AttributeError on ``npu_event``)."""
    ext = torch_npu_ipc.ExternalStream(raw)
    with pytest.raises(TypeError, match=r"ExternalStream\.record_event\(\) takes a torch\.npu\.Event"):
        ext.record_event(bad)  # type: ignore[arg-type]
    for arg in (bad, None):
        with pytest.raises(TypeError, match=r"ExternalStream\.wait_event\(\) takes a torch\.npu\.Event"):
            ext.wait_event(arg)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"ExternalStream\.wait_stream\(\) takes a torch\.npu\.Stream"):
            ext.wait_stream(arg)  # type: ignore[arg-type]
    ext.wait_event(ext.record_event())  # the right types still work


def test_record_stream_is_refused(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    x = torch.ones(4, device="npu:0")
    with pytest.raises(RuntimeError, match=r"record_stream.*not supported on an ExternalStream.*synchronize"):
        x.record_stream(ext)
    with pytest.raises(RuntimeError, match="not supported on an ExternalStream"):
        x.record_stream(s=ext)  # the original's parameter name
    if impl == "native":  # torch_npu's object for the same stream
        with torch.npu.stream(ext):
            cur = torch.npu.current_stream()
        with pytest.raises(RuntimeError, match="not supported on an ExternalStream"):
            x.record_stream(cur)
    x.record_stream(torch.npu.Stream())  # other streams are untouched
    assert floats(x + 1) == [2.0] * 4


def test_graph_capture_is_refused(impl: str, raw: int) -> None:
    ext = torch_npu_ipc.ExternalStream(raw)
    g = torch.npu.NPUGraph()
    with pytest.raises(RuntimeError, match=r"graph capture on an ExternalStream is not supported.*wait_stream"):
        with torch.npu.graph(g, stream=ext):
            pass
    assert torch.npu.current_stream() == torch.npu.default_stream()
    with pytest.raises(RuntimeError, match="graph capture on an ExternalStream"):
        torch.npu.graph(g, None, ext)  # stream given by position
    if impl == "native":  # the proxy is an ordinary torch_npu stream once current
        with torch.npu.stream(ext), pytest.raises(RuntimeError, match="graph capture on an ExternalStream"):
            g.capture_begin()
    assert floats(torch.ones(2, device="npu:0") * 2) == [2.0, 2.0]


# The same calls on ordinary streams, run in a fresh process with torch_npu
# alone ("plain") and with the plugin and its guards installed ("plugin"):
# every outcome (result, or exception type and message) must be the same.
_GUARD_SCENARIOS = r"""
import json, os, re, sys

if sys.argv[1] == "plugin":
    import ctypes
    import torch_npu_ipc
import torch
import torch_npu

torch.npu.set_device(0)
if sys.argv[1] == "plugin":
    acl = ctypes.CDLL("libascendcl.so")
    acl.aclrtCreateStream.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    raw = ctypes.c_void_p()
    assert acl.aclrtCreateStream(ctypes.byref(raw)) == 0
    ext = torch_npu_ipc.ExternalStream(raw.value)
    assert getattr(torch.Tensor.record_stream, "_torch_npu_ipc_guard", False)
    assert getattr(torch.npu.NPUGraph.capture_begin, "_torch_npu_ipc_guard", False)
    assert getattr(torch.npu.graph.__init__, "_torch_npu_ipc_guard", False)
    assert getattr(torch.npu.Event.record, "_torch_npu_ipc_guard", False)
    assert getattr(torch.npu.Event.wait, "_torch_npu_ipc_guard", False)

out = {}

def run(name, fn):
    try:
        out[name] = "ok: " + repr(fn())
    except BaseException as e:
        msg = re.sub(r"0x[0-9a-fA-F]+", "0x?", f"{type(e).__name__}: {e}")
        out[name] = re.sub(r"[0-9]+", "N", msg)  # pids, times, ids, line numbers
    out[name + ": current stream afterwards"] = repr(torch.npu.current_stream() == torch.npu.default_stream())
    torch.npu.set_stream(torch.npu.default_stream())

s = torch.npu.Stream()
x = torch.ones(4, device="npu:0")
torch.npu.synchronize()

def rs(*a, **k):
    t = torch.ones(4, device="npu:0")
    r = t.record_stream(*a, **k)
    del t  # freed: the allocator now tracks the recorded stream
    return r, torch.ones(4, device="npu:0").add(1).tolist()

run("record_stream side stream", lambda: rs(s))
run("record_stream s=", lambda: rs(s=s))
run("record_stream stream=", lambda: rs(stream=s))
run("record_stream current", lambda: rs(torch.npu.current_stream()))
run("record_stream None", lambda: rs(None))
run("record_stream str", lambda: rs("npu"))
run("record_stream no argument", lambda: rs())
run("record_stream two", lambda: rs(s, s))
run("record_stream cpu tensor", lambda: torch.ones(2).record_stream(s))
run("record_stream unbound", lambda: torch.Tensor.record_stream(x, s))

# (Not a non-stream argument: torch_npu's C++ reads whatever it is given as a stream object.)
def ev(method, *a, **k):
    e = torch.npu.Event()
    if method == "wait":
        e.record(s)
    r = getattr(e, method)(*a, **k)
    torch.npu.synchronize()
    return r, e.query()

run("event record side stream", lambda: ev("record", s))
run("event record stream=", lambda: ev("record", stream=s))
run("event record current", lambda: ev("record"))
run("event record None", lambda: ev("record", None))
run("event record two", lambda: ev("record", s, s))
run("event record unknown keyword", lambda: ev("record", bogus=s))
run("event wait side stream", lambda: ev("wait", s))
run("event wait current", lambda: ev("wait"))
run("event wait stream=", lambda: ev("wait", stream=torch.npu.default_stream()))
run("event wait unbound", lambda: torch.npu.Event.wait(torch.npu.Event(), s))

# torch_npu 2.7.1 aborts the process when an NPUGraph whose capture failed is destroyed
# ("The graph should be registered to the state"): keep them, and skip their destructors.
graphs_kept = []

def graph(*a, **k):
    g = torch.npu.NPUGraph()
    graphs_kept.append(g)
    with torch.npu.graph(g, *a, **k):
        y = x * 2
    g.replay()
    torch.npu.synchronize()
    return y.tolist()

def begin():
    g = torch.npu.NPUGraph()
    graphs_kept.append(g)
    with torch.npu.stream(s):
        g.capture_begin()
        y = x * 3
        g.capture_end()
    g.replay()
    torch.npu.synchronize()
    return y.tolist()

run("graph", lambda: graph())
run("graph stream=", lambda: graph(stream=s))
run("graph positional", lambda: graph(None, s, False))
run("graph unknown keyword", lambda: graph(bogus=1))
run("graph too many arguments", lambda: graph(None, s, False, "global", 1))
run("capture_begin on a side stream", begin)
print(json.dumps(out), flush=True)
os._exit(0)
"""


def _run_fresh(code: str, *args: str, hide: str | None = None, env: dict[str, str] | None = None) -> str:
    """Run ``code`` in a fresh interpreter (this session's environment, optionally TORCH_NPU_IPC_ACL_HIDE=hide).

    ``env`` overrides variables of the environment. Returns its stdout; it must exit 0.
    """
    env = dict(os.environ, **(env or {}))
    if hide is not None:
        env["TORCH_NPU_IPC_ACL_HIDE"] = hide
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


_PINNED_COPIES = r"""
import gc, sys
import torch_npu_ipc
import torch
import aclsim
sys.path[:0] = sys.argv[1:3]
from other_lib import D2D, OtherLib

WORK = float(sys.argv[3])

lib = OtherLib()
torch.npu.set_device(0)
ptr = lib.create_stream(0)
ext = torch_npu_ipc.ExternalStream(ptr)
assert ext.native, "this test is about the native path"
src = torch.arange(8.0, device="npu:0")
d = torch.zeros(8, device="npu:0")
torch.npu.synchronize()
aclsim.sleep(ptr, WORK)
lib.copy_async(d.data_ptr(), src.data_ptr(), 32, D2D, ptr)  # the library's write, behind its slow work
pinned = torch.full((8,), -1.0).pin_memory()
with torch.npu.stream(ext):
    back = d.to("cpu", non_blocking=True)  # after the library's write: ext's order
    d.copy_(pinned, non_blocking=True)  # after the read above
    up = pinned.to("npu:0", non_blocking=True)
ext.synchronize()
assert back.is_pinned() and back.tolist() == [float(i) for i in range(8)], back
assert d.tolist() == [-1.0] * 8 and up.tolist() == [-1.0] * 8
del back, pinned  # torch_npu's host allocator records on the copies' streams here
gc.collect()
torch.npu.synchronize()
print("freed", flush=True)
"""


@requires_aclsim
@requires_native
def test_pinned_non_blocking_copies_with_ext_current() -> None:
    """Native path: non_blocking copies between pinned host memory and the NPU with ext current.

    torch_npu's host allocator records an event on each copy's stream when the pinned block is freed and
    refuses an external stream: the process ended there (exit code 134, "External NPU stream is not
    supported in NPUEvent::record"). The copies now run on a pool stream ordered with ext.
    """
    here = Path(__file__).resolve().parent
    assert "freed" in _run_fresh(_PINNED_COPIES, str(here), str(here.parent), str(WORK))


def _guard_outcomes(kind: str) -> dict[str, str]:
    return json.loads(_run_fresh(_GUARD_SCENARIOS, kind).strip().splitlines()[-1])


def test_guards_leave_ordinary_streams_as_torch_npu_has_them() -> None:
    """record_stream, event record / wait, graph capture on ordinary streams: as without the plugin.

    On aclsim graph capture fails (it lacks aclrtSetStreamAttribute); it must fail the same way.
    """
    plain = _guard_outcomes("plain")
    plugin = _guard_outcomes("plugin")
    assert plugin == plain
    assert plain["record_stream side stream"] == "ok: (None, [2.0, 2.0, 2.0, 2.0])"


def _guards_are_lazy() -> None:
    try:
        import torch_npu_ipc
        from torch_npu_ipc import streams as s

        graphs = torch_npu.npu.graphs

        def guarded() -> tuple[Any, ...]:
            event = torch_npu.npu.Event
            return (
                torch.Tensor.record_stream,
                graphs.NPUGraph.capture_begin,
                graphs.graph.__init__,
                event.record,
                event.wait,
            )

        originals = guarded()
        assert originals[0] is torch._C.TensorBase.record_stream
        assert not s._GUARDS_INSTALLED
        assert not any(hasattr(f, "_torch_npu_ipc_guard") for f in originals)
        lib = OtherLib()
        torch.npu.set_device(0)
        ptr = lib.create_stream(0)
        ext = torch_npu_ipc.ExternalStream(ptr)
        wrapped = guarded()
        assert all(getattr(f, "_torch_npu_ipc_guard", False) for f in wrapped)
        assert [f._torch_npu_ipc_original for f in wrapped] == list(originals)
        torch_npu_ipc.ExternalStream(ptr)  # installed once
        assert guarded() == wrapped
        ext.synchronize()
        del ext
        lib.destroy_stream(ptr)
    except BaseException:
        traceback.print_exc()
        raise


def test_guards_are_installed_by_the_first_external_stream() -> None:
    """Importing the plugin leaves torch's functions alone; the first ExternalStream wraps them once."""
    from helpers import run_processes

    with _rebuilt_libraries_noted():
        run_processes([(_guards_are_lazy, ())], timeout=WORKER_TIMEOUT)


# ------------------------------------------------ without the entry point
# A fresh process wraps a ctypes-made stream, runs an op on it and checks
# the result; {check} says which implementation it must have picked.
_WRAP_AND_RUN = r"""
import ctypes
import torch_npu_ipc
import torch
from torch_npu_ipc import _C, streams
{prelude}
acl = ctypes.CDLL("libascendcl.so")
acl.aclrtCreateStream.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
acl.aclrtSynchronizeStream.argtypes = [ctypes.c_void_p]
acl.aclrtDestroyStream.argtypes = [ctypes.c_void_p]
torch.npu.set_device(0)
raw = ctypes.c_void_p()
assert acl.aclrtCreateStream(ctypes.byref(raw)) == 0
ext = torch_npu_ipc.ExternalStream(raw.value)
{check}
x = torch.arange(4, dtype=torch.float32, device="npu:0")
torch.npu.synchronize()
with torch.npu.stream(ext):
    y = x * 2
ext.synchronize()
assert ext.query() and y.tolist() == [0.0, 2.0, 4.0, 6.0]
del ext
assert acl.aclrtSynchronizeStream(raw) == 0 and acl.aclrtDestroyStream(raw) == 0
print("{label}: ok")
"""

_WITHOUT_ENTRY_POINT = _WRAP_AND_RUN.format(
    prelude="""
assert not _C._stream_from_external_available() and streams._from_external is None
try:
    _C._stream_from_external(1, 0)
except RuntimeError as e:
    assert "does not export c10_npu::getStreamFromExternal" in str(e), e
else:
    raise SystemExit("_stream_from_external did not raise")""",
    check='assert not ext.native and ext.npu_stream != raw.value and "proxy" in repr(ext)',
    label="proxy",
)

# torch_npu's per-stream task queue refuses external streams: the proxy is chosen, with one warning.
_PER_STREAM_QUEUE = _WRAP_AND_RUN.format(
    prelude="""
import warnings
warnings.simplefilter("always")
caught = warnings.catch_warnings(record=True)
seen = caught.__enter__()""",
    check="""assert not ext.native and ext.npu_stream != raw.value, ext
second = torch_npu_ipc.ExternalStream(raw.value)
caught.__exit__(None, None, None)
texts = [str(w.message) for w in seen]
assert len(texts) == 1, texts
assert "PER_STREAM_QUEUE=1" in texts[0] and "proxy" in texts[0] and "Unset PER_STREAM_QUEUE" in texts[0], texts
from torch_npu_ipc import doctor
line = [x for x in doctor.report() if "ExternalStream " in x][-1]  # the path line, after the native-feature one
assert "proxy stream" in line and "PER_STREAM_QUEUE=1" in line, line
del second""",
    label="per-stream proxy",
)

# The probe skips its event record without aclrtCreateEventExWithFlag.
_WITHOUT_EVENT_EX = _WRAP_AND_RUN.format(prelude="", check="assert ext.native", label="native")


@requires_native
def test_native_path_without_event_ex_still_constructs() -> None:
    """On a CANN without aclrtCreateEventExWithFlag the constructor's context probe is skipped, not fatal."""
    assert "native: ok" in _run_fresh(_WITHOUT_EVENT_EX, hide="aclrtCreateEventExWithFlag")


@pytest.mark.mode_independent  # sets both queue variables for its child itself
@pytest.mark.skipif(not HAS_NATIVE, reason=NATIVE_ABSENT)
def test_per_stream_queue_selects_the_proxy() -> None:
    """PER_STREAM_QUEUE=1 (task queue on): torch_npu would refuse the stream, so ops run on a proxy; one warning."""
    out = _run_fresh(_PER_STREAM_QUEUE, env={"PER_STREAM_QUEUE": "1", "TASK_QUEUE_ENABLE": "1"})
    assert "per-stream proxy: ok" in out


@pytest.mark.mode_independent  # sets both queue variables for its child itself
@pytest.mark.skipif(not HAS_NATIVE, reason=NATIVE_ABSENT)
def test_per_stream_queue_without_task_queue_stays_native() -> None:
    """PER_STREAM_QUEUE=1 with TASK_QUEUE_ENABLE=0: no queue refuses the stream, so it stays native."""
    out = _run_fresh(_WITHOUT_EVENT_EX, env={"PER_STREAM_QUEUE": "1", "TASK_QUEUE_ENABLE": "0"})
    assert "native: ok" in out


def test_without_the_native_entry_point_the_proxy_is_chosen() -> None:
    """torch_npu's getStreamFromExternal hidden in C++ (as on an older torch_npu): the module picks the proxy."""
    assert "proxy: ok" in _run_fresh(_WITHOUT_ENTRY_POINT, hide="c10_npu::getStreamFromExternal")


# ---------------------------------------------------------------- docs
def _docs_example() -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "external_stream.md").read_text()
    section = text.split("## Interop example", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/external_stream.md: no python block in the interop example"
    return match.group(1)


def test_docs_interop_example_runs() -> None:
    """The interop example of docs/external_stream.md, run as written in a fresh process."""
    assert "interop example: ok" in _run_fresh(_docs_example())


# ---------------------------------------------------------------- lifetime
def test_wrappers_never_destroy_the_stream(impl: str, other: OtherLib) -> None:
    """Dropping every ExternalStream leaves the stream to its owner, who can still use and destroy it."""
    ptr = other.create_stream(0)
    ext = torch_npu_ipc.ExternalStream(ptr)
    x = made(torch.arange(4, dtype=torch.float32, device="npu:0"))
    with torch.npu.stream(ext):
        y = x + 1
    ext.synchronize()
    del ext
    gc.collect()
    out = made(torch.zeros(4, device="npu:0"))
    other.copy_async(out.data_ptr(), y.data_ptr(), 16, D2D, ptr)
    other.destroy_stream(ptr)  # synchronizes, then destroys: both fail on a destroyed stream
    assert floats(out) == [1.0, 2.0, 3.0, 4.0]


WORKER_TIMEOUT = 300  # s: a spawned worker imports torch and torch_npu, which takes 10-40 s on a loaded machine


def _use_after_destroy(mode: str, impl: str) -> None:
    """Worker: the owner destroys the stream; using the ExternalStream raises, nothing crashes.

    Whatever ends it, the failing test's captured output says where: a
    Python traceback for an exception, every thread's stack for a crash
    (faulthandler) or for a hang (dumped before the parent's deadline).
    """
    import faulthandler

    faulthandler.enable()
    faulthandler.dump_traceback_later(WORKER_TIMEOUT - 30, exit=False)
    print(f"worker {mode}/{impl}: started", file=sys.stderr, flush=True)
    try:
        _use_after_destroy_body(mode, impl)
    except BaseException:
        traceback.print_exc()  # shown with the failing test's captured output
        raise
    finally:
        faulthandler.cancel_dump_traceback_later()
    print(f"worker {mode}/{impl}: done", file=sys.stderr, flush=True)


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

    with _rebuilt_libraries_noted():
        run_processes([(_use_after_destroy, (mode, impl))], timeout=WORKER_TIMEOUT)


# ---------------------------------------------------------------- cross-device copies on an external stream
# Fresh-process scripts: argv[1] is "native" or "proxy", argv[2] "touch" when torch uses npu:1 first.
# The other library makes a raw stream on npu:1 and `ext` wraps it; torch's device is npu:0.
_EXT_ON_NPU1 = r"""
import ctypes, gc, json, sys
import torch_npu_ipc
import torch
from torch_npu_ipc import streams as s

if sys.argv[1] == "proxy":
    s._from_external = None
lib = ctypes.CDLL("libascendcl.so")
lib.aclrtSetDevice.argtypes = [ctypes.c_int32]
lib.aclrtCreateStream.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
torch.npu.set_device(0)
torch.ones(1, device="npu:0")
if sys.argv[2] == "touch":
    torch.ones(1, device="npu:1")
assert lib.aclrtSetDevice(1) == 0
raw = ctypes.c_void_p()
assert lib.aclrtCreateStream(ctypes.byref(raw)) == 0
assert lib.aclrtSetDevice(0) == 0  # the library puts the thread's device back, as torch_npu believes it is
ext = torch_npu_ipc.ExternalStream(raw.value, device=1)
"""


def _skip_without(kind: str) -> None:
    """Skip a fresh-process test of the native implementation where there is none."""
    if kind == "native" and not HAS_NATIVE:
        pytest.skip(NATIVE_ABSENT)
    if kind == "native" and ext_streams.per_stream_queue_refusal():
        pytest.skip(NATIVE_REFUSED)


_COPIES_ON_EXT = (
    _EXT_ON_NPU1
    + r"""
out = {}
for i in range(5):
    a = torch.arange(6, dtype=torch.float32, device="npu:1") + i
    torch.npu.synchronize(1)
    with torch.npu.stream(ext):
        b = a.to("npu:0")  # the transfer runs on ext (npu:1's current stream)
        c = torch.zeros(6, device="npu:1")
        c.copy_(b)  # and into npu:1, ext waiting for it
        got_c = c.tolist()
    got_b = b.tolist()
    del a, c  # freeing blocks marked with ext's work: torch_npu refuses events on ext
    gc.collect()
    torch.npu.synchronize(0), torch.npu.synchronize(1)
    out.setdefault("values", []).append(got_b == got_c == [float(k + i) for k in range(6)])
w = torch.ones(6, device="npu:1", requires_grad=True)
with torch.npu.stream(ext):
    y = (w.to("npu:0") * 2).sum()
try:
    y.backward()
    out["backward"] = w.grad.tolist()
except RuntimeError as e:
    out["backward"] = str(e).splitlines()[0]
del w, y
gc.collect()
torch.npu.synchronize(0), torch.npu.synchronize(1)
print(json.dumps(out), flush=True)
"""
)


@requires_aclsim
@pytest.mark.devices(2)
@pytest.mark.parametrize("kind", ["native", "proxy"])
def test_cross_device_copies_with_an_external_stream_current(kind: str) -> None:
    """Copies whose transfer runs on an external stream, and the frees after them.

    The copy marks the blocks it read or wrote with the stream that used them;
    torch_npu records an event on each marked stream when a block is freed,
    and refuses to on an external stream. From inside the block's deleter that
    refusal aborted the process (exit 134) on the native path.
    """
    _skip_without(kind)
    out = json.loads(_run_fresh(_COPIES_ON_EXT, kind, "touch").strip().splitlines()[-1])
    assert out["values"] == [True] * 5
    if kind == "proxy":
        assert out["backward"] == [2.0] * 6
    else:
        # torch_npu's autograd engine waits on the forward's stream with its own event task, which it
        # refuses on an external stream: a Python error, not an abort.
        assert "External NPU stream is not supported" in out["backward"], out["backward"]


@requires_native
def test_external_streams_are_told_apart_from_torch_npus_own(raw: int) -> None:
    """The stream-id rule behind the copy's marking: only streams made by getStreamFromExternal match it."""
    from torch_npu_ipc import _C

    def triple(stream: torch.npu.Stream) -> tuple[int, int, int]:
        return (stream.stream_id, stream.device_index, stream.device_type)

    own = [
        torch.npu.default_stream(0),
        torch.npu.current_stream(0),
        torch.npu.Stream(device=0),
        torch.npu.Stream(device=0, priority=-1),
        torch_npu.npu.SyncLaunchStream(device=0),
    ]
    assert [_C._is_external_stream(triple(s)) for s in own] == [False] * len(own)
    ours = torch_npu_ipc.ExternalStream(raw)
    theirs = torch_npu.npu.ExternalStream(raw, device=0)
    assert _C._is_external_stream(triple(ours))
    assert _C._is_external_stream(triple(theirs))


_FIRST_USE_OF_A_DEVICE = (
    _EXT_ON_NPU1
    + r"""
ext.record_event()
torch.npu.current_stream().wait_stream(ext)
ext.wait_stream(torch.npu.current_stream())
print("ok", flush=True)
"""
)


@pytest.mark.devices(2)
@pytest.mark.parametrize("kind", ["native", "proxy"])
def test_events_on_an_external_stream_of_a_device_torch_has_not_used(kind: str) -> None:
    """The first record / wait on an ExternalStream of a device torch never used works.

    torch_npu sets a device's streams up on their first use with that device
    current: the first ``record_event()`` raised "Uninitialized default NPU
    stream for device " (without the number), the second worked.
    """
    _skip_without(kind)
    assert _run_fresh(_FIRST_USE_OF_A_DEVICE, kind, "untouched").strip().splitlines()[-1] == "ok"
