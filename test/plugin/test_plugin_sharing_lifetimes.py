"""Lifetimes around tensor sharing, between real spawned processes on aclsim.

- A producer's export key stays valid for descriptors in flight when the
  caching allocator frees some other segment (``empty_cache``), and a
  segment that was freed and allocated again gets a new key.
- Imports close in the runtime's order (CANN's aclrtIpcMemClose unmaps a
  process's oldest import of a key): one block imported on two devices
  keeps the older mapping when the newer one is dropped, and a producer that
  received its own tensor closes that import before unexporting the segment.
- Receiving a tensor allocates nothing on the receiver's device: the
  storage points at the producer's memory from the start.
- A producer running ahead of its device waits for receivers' releases on
  their way when the device runs short, instead of running out of memory.
- A send whose device has no IPC event left synchronizes instead and warns
  (also in a Queue's feeder thread, where an error would drop the message);
  sends use events again once receivers caught up.
- On a chip without IPC events every send synchronizes, with one warning,
  and receivers wait on nothing.
- ``Tensor.record_stream`` keeps working on shared memory: a block this
  process shared is not reused while a side stream that recorded it still
  reads it (also when the plugin's cross-device copy records it, or torch
  itself: a device-aware Future's value), and a received tensor goes back to
  its producer only once every stream that recorded it finished.
- A receiver whose device is out of events (aclsim's ``ACLSIM_MAX_EVENTS``)
  cannot fence its stream before giving a tensor back: it synchronizes the
  stream instead (counted in ``release_syncs``), so the producer still gets
  the memory only after the receiver's work ran. Receiving on a stream that
  needs a new fence then raises a clear error and takes nothing: the same
  descriptor is received once events are back, and fences resume.
- An exiting producer's fence request is answered once the work queued on a
  held tensor's device ran, also on a side stream it was never recorded on;
  answering it holds back no other producer's release, and a forked child's
  exit asks nothing for its parent's tensors.
- A producer that ends without its exit wait is reported by a receiver
  holding its tensors, except once the receiver itself is exiting
  (multiprocessing terminating a DataLoader's persistent workers).
"""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch_npu
from helpers import run_script
from plugin_util import EventHoard
from sharing_util import Scenario, delta, get, spawn_reporting

import aclsim
import torch_npu_ipc

pytestmark = pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)")

# torch's own stream records (recordDataPtrOnStream) reach the plugin through its device-guard
# wrapper, built against torch >= 2.13 only (docs/support.md).
GUARD_WRAPPED = torch_npu_ipc.event_guard.status()["wrapped"]
NO_GUARD_WRAPPER = "the device-guard wrapper (torch's own stream records) is built against torch >= 2.13 only"

SMALL = 1024  # elements: a small-pool block
LARGE = 1 << 20  # elements (4 MB of float32): a segment of its own
HUGE = 6 << 20  # elements (24 MB): more than a 20 MB large-pool segment holds, so a segment of its own


def _segments_freed() -> int:
    return torch.npu.memory_stats(0).get("segment.all.freed", 0)


def _drain() -> None:
    """Collect until every block this process shared is back (receivers released them)."""
    deadline = time.monotonic() + 60
    while True:
        torch_npu_ipc.ipc_collect()
        st = torch_npu_ipc.sharing_stats()
        if st["limbo_blocks"] == 0 and st["live_slots"] == 0:
            return
        assert time.monotonic() < deadline, f"blocks not returned: {st}"
        time.sleep(0.02)


# ------------------------------------------------------------------------- export keys
def _receive_expect(inbox: Any, numel: int, value: float, why: str = "wrong data received") -> None:
    """Import the next descriptor from ``inbox``, check it holds ``numel`` copies of ``value``, and drop it."""
    t = torch_npu_ipc.import_tensor(get(inbox))
    assert torch.equal(t.cpu(), torch.full((numel,), value)), why
    del t


def _keys_consumer(inbox: Any, outbox: Any) -> None:
    torch.npu.set_device(0)
    dx, dy = get(inbox)
    x, y = torch_npu_ipc.import_tensor(dx), torch_npu_ipc.import_tensor(dy)
    assert torch.equal(x.cpu(), torch.full((SMALL,), 5.0)), "the in-flight tensor's key was closed under it"
    assert torch.equal(y.cpu(), torch.full((SMALL,), 6.0))
    del x, y
    outbox.put("dropped")
    _receive_expect(inbox, LARGE, 1.0)
    outbox.put("dropped")
    _receive_expect(inbox, LARGE, 2.0, "a freed segment's old key was handed out again")
    outbox.put("dropped")
    _receive_expect(inbox, LARGE, 3.0)
    outbox.put("dropped")
    _receive_expect(inbox, LARGE, 4.0, "reset_accumulated_memory_stats hid a segment free")
    outbox.put("dropped")
    _receive_expect(inbox, HUGE, 5.0)
    outbox.put("dropped")
    dd, dg = get(inbox)
    d, g = torch_npu_ipc.import_tensor(dd), torch_npu_ipc.import_tensor(dg)
    assert torch.equal(d.cpu(), torch.full((LARGE,), 4.0)), "a pinned key stopped importing"
    assert torch.equal(g.cpu(), torch.full((HUGE,), 6.0)), "a re-exported segment gave old values"
    del d, g
    outbox.put("dropped")


def _send_and_let_go(to_cons: Any, from_cons: Any, numel: int, value: float) -> int:
    """Send a new tensor of ``numel`` copies of ``value``, drop it once the consumer did; return its address."""
    t = torch.full((numel,), value, device="npu:0")
    to_cons.put(torch_npu_ipc.export_tensor(t))
    assert get(from_cons) == "dropped"
    ptr = t.data_ptr()
    del t
    _drain()
    return ptr


def _keys_producer(results: Any) -> None:
    to_cons, from_cons = Scenario().queue(), Scenario().queue()
    cons = spawn_reporting(results, "consumer", _keys_consumer, to_cons, from_cons)
    torch.npu.set_device(0)
    # 1. A descriptor in flight while another segment goes back to the runtime.
    x = torch.full((SMALL,), 5.0, device="npu:0")
    dx = torch_npu_ipc.export_tensor(x)
    big = torch.empty(64 << 20, dtype=torch.uint8, device="npu:0")
    del big
    freed = _segments_freed()
    torch.npu.empty_cache()
    assert _segments_freed() > freed, "empty_cache freed no segment: the scenario did not happen"
    y = torch.full((SMALL,), 6.0, device="npu:0")
    dy = torch_npu_ipc.export_tensor(y)  # the first export after the free checks the cached keys
    to_cons.put((dx, dy))
    assert get(from_cons) == "dropped"
    del x, y
    _drain()

    # 2. A segment freed and allocated again is exported again (a new key).
    a_ptr = _send_and_let_go(to_cons, from_cons, LARGE, 1.0)
    freed = _segments_freed()
    torch.npu.empty_cache()
    assert _segments_freed() > freed, "a's segment was not freed: the scenario did not happen"
    b = torch.full((LARGE,), 2.0, device="npu:0")
    c0 = aclsim.counters()
    db = torch_npu_ipc.export_tensor(b)
    d = delta(c0, aclsim.counters())
    same = b.data_ptr() == a_ptr
    assert d.get("ipc_mem_export") == 1, f"b's segment was not exported afresh (same address: {same}): {d}"
    to_cons.put(db)
    assert get(from_cons) == "dropped"

    # 3. The same after reset_accumulated_memory_stats zeroed the count of
    # freed segments: c is exported with the count at 0, its segment freed,
    # the count zeroed again, and d takes c's address and size. Counting
    # frees, the key cache saw nothing, and the consumer read c's old values
    # with no error (before the trace tracker, and without one, before the
    # reset was wrapped).
    del b
    _drain()
    torch.npu.empty_cache()
    torch.npu.reset_accumulated_memory_stats(0)
    c_ptr = _send_and_let_go(to_cons, from_cons, LARGE, 3.0)
    torch.npu.empty_cache()
    torch.npu.reset_accumulated_memory_stats(0)
    d = torch.full((LARGE,), 4.0, device="npu:0")
    assert d.data_ptr() == c_ptr, "d took another address than c: the scenario did not happen"
    to_cons.put(torch_npu_ipc.export_tensor(d))
    assert get(from_cons) == "dropped"

    # 4. What the wrapped reset calls where torch_npu has no trace tracker:
    # a key that a live shared block pins stays (d's); the others close (e's
    # segment, still cached by the allocator after e died, is exported again).
    e_ptr = _send_and_let_go(to_cons, from_cons, HUGE, 5.0)
    c0 = aclsim.counters()
    torch_npu_ipc._C._export_keys_forget()
    dd = torch_npu_ipc.export_tensor(d)
    assert delta(c0, aclsim.counters()).get("ipc_mem_export", 0) == 0, "d's pinned key was closed"
    g = torch.full((HUGE,), 6.0, device="npu:0")
    assert g.data_ptr() == e_ptr, "g took another address than e: the scenario did not happen"
    dg = torch_npu_ipc.export_tensor(g)
    assert delta(c0, aclsim.counters()).get("ipc_mem_export", 0) == 1, "e's unpinned key was not closed"
    to_cons.put((dd, dg))
    assert get(from_cons) == "dropped"
    cons.join(60)
    assert cons.exitcode == 0


def test_export_keys_across_segment_frees() -> None:
    """In-flight descriptors survive empty_cache freeing another segment; a freed segment gets a new key.

    Also after ``reset_accumulated_memory_stats`` zeroed the allocator's
    counters (with torch_npu's trace tracker, or the wrapped reset without one).
    """
    s = Scenario()
    s.also_expect("consumer")
    s.start("producer", _keys_producer, s.results)
    s.finish(timeout=180)


# ------------------------------------------------------------------- import close order
# CANN's aclrtIpcMemClose(key) unmaps the process's OLDEST import of the key, whatever device
# made it, and retracts the process's own export only when it holds no import of the key
# (aclsim does the same; docs/simulator.md).
def _two_devices_consumer(inbox: Any, outbox: Any) -> None:
    def drop_and_wait(name: str) -> None:
        outbox.put(name)  # the producer answers once this receiver gave the block back
        assert get(inbox) == "released"

    da, db, dc = get(inbox)
    c0 = aclsim.counters()
    a = torch_npu_ipc.import_tensor(da, device=0)
    b = torch_npu_ipc.import_tensor(db, device=1)  # the same block's key, a second mapping
    assert torch.equal(b.cpu(), torch.full((SMALL,), 2.0))
    del b  # its close would unmap a's mapping, the oldest of the key: it waits for a
    drop_and_wait("b")
    assert torch.equal(a.cpu(), torch.full((SMALL,), 1.0)), "dropping the npu:1 import unmapped npu:0's"
    assert delta(c0, aclsim.counters()).get("ipc_mem_close", 0) == 0
    c = torch_npu_ipc.import_tensor(dc, device=1)  # a third mapping, listed after the dead one
    del a  # closes a's mapping, then b's (now the oldest): c's stays
    drop_and_wait("a")
    assert delta(c0, aclsim.counters()).get("ipc_mem_close", 0) == 2
    assert torch.equal((c + 1).cpu(), torch.full((SMALL,), 4.0)), "closing the older imports unmapped c's"
    del c
    drop_and_wait("c")
    d = delta(c0, aclsim.counters())
    assert d.get("ipc_mem_import") == 3 and d.get("ipc_mem_close") == 3, d


def _two_devices_producer(results: Any) -> None:
    to_cons, from_cons = Scenario().queue(), Scenario().queue()
    cons = spawn_reporting(results, "consumer", _two_devices_consumer, to_cons, from_cons)
    ts = [torch.full((SMALL,), v, device="npu:0") for v in (1.0, 2.0, 3.0)]  # one small-pool segment
    to_cons.put(tuple(torch_npu_ipc.export_tensor(t) for t in ts))
    for name, live in (("b", 2), ("a", 1), ("c", 0)):
        assert get(from_cons) == name
        deadline = time.monotonic() + 30  # the receiver releases (after closing its mapping) off its thread
        while torch_npu_ipc.sharing_stats()["live_slots"] > live:
            assert time.monotonic() < deadline, f"{name} was not released"
            time.sleep(0.01)
        to_cons.put("released")
    cons.join(60)
    assert cons.exitcode == 0


@pytest.mark.devices(2)
def test_imports_of_one_block_on_two_devices_close_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block imported on npu:0 and npu:1: dropping the newer import leaves the older mapping intact.

    Imports are closed with their last tensor here (``TORCH_NPU_IPC_KEPT_IMPORTS=0``); with
    the default, the same happens when a kept import is pushed out by newer ones.
    """
    monkeypatch.setenv("TORCH_NPU_IPC_KEPT_IMPORTS", "0")
    s = Scenario()
    s.also_expect("consumer")
    s.start("producer", _two_devices_producer, s.results)
    s.finish(timeout=120)


def _self_receiver() -> None:
    x = torch.full((LARGE,), 5.0, device="npu:0")
    y = torch_npu_ipc.import_tensor(torch_npu_ipc.export_tensor(x))  # this process imports its own key
    assert torch.equal(y.cpu(), torch.full((LARGE,), 5.0))
    del y  # the import stays mapped (kept imports)
    del x
    _drain()
    c0 = aclsim.counters()
    freed = _segments_freed()
    torch.npu.empty_cache()
    assert _segments_freed() > freed, "x's segment was not freed: the scenario did not happen"
    torch_npu_ipc.export_tensor(torch.ones(SMALL, device="npu:0"))  # checks the keys without a trace tracker
    d = delta(c0, aclsim.counters())
    # Two closes: the kept import first, then the export (one close would have unmapped the import
    # and left the freed segment exported).
    assert d.get("ipc_mem_close", 0) == 2, d


def test_a_block_sent_to_itself_is_unexported_when_its_segment_is_freed() -> None:
    """A producer that received its own tensor closes that import before the segment's export."""
    s = Scenario()
    s.start("self", _self_receiver)
    s.finish(timeout=120)


# ------------------------------------------------------------------------ receiver memory
NBYTES = 64 << 20


def _footprint_values() -> torch.Tensor:
    return (torch.arange(NBYTES // 4) % 7).float()


def _footprint_consumer(inbox: Any, outbox: Any) -> None:
    torch.npu.set_device(0)
    torch.ones(1, device="npu:0")  # the device is up; its small pool holds a segment now
    reserved = torch.npu.memory_reserved(0)
    t = torch_npu_ipc.import_tensor(get(inbox))
    grew = torch.npu.memory_reserved(0) - reserved
    assert grew == 0, f"receiving {NBYTES} bytes reserved {grew} bytes on the receiver's device"
    assert t.untyped_storage().nbytes() == NBYTES
    assert torch_npu.get_npu_format(t) == 2, "not an ND tensor"  # ACL_FORMAT_ND
    want = _footprint_values()
    assert torch.equal(t.cpu(), want)
    assert torch.equal((t[1::2] * 2).cpu(), want[1::2] * 2)
    assert torch.equal(t.view(64, -1).sum(1).cpu(), want.view(64, -1).sum(1))  # small integers: exact sums
    del t
    outbox.put("dropped")


def _footprint_producer(results: Any) -> None:
    to_cons, from_cons = Scenario().queue(), Scenario().queue()
    cons = spawn_reporting(results, "consumer", _footprint_consumer, to_cons, from_cons)
    t = _footprint_values().to("npu:0")
    to_cons.put(torch_npu_ipc.export_tensor(t))
    assert get(from_cons) == "dropped"
    cons.join(60)
    assert cons.exitcode == 0


def test_receiving_allocates_nothing() -> None:
    """A received 64 MB tensor adds nothing to the receiver's reserved memory, and works in kernels."""
    s = Scenario()
    s.also_expect("consumer")
    s.start("producer", _footprint_producer, s.results)
    s.finish(timeout=180)


# ------------------------------------------------------------------- out of IPC events
MAX_IPC = 2  # ACLSIM_MAX_IPC_EVENTS for the next test


def _out_of_events_consumer(inbox: Any, outbox: Any) -> None:
    t = get(inbox)  # pickled in the producer's Queue feeder thread, with no event left there either
    assert torch.equal(t.cpu(), torch.full((SMALL,), 8.0)), "the tensor put on the Queue lost data"
    del t
    for _ in range(MAX_IPC + 1):
        _receive_expect(inbox, SMALL, 7.0)
    outbox.put("received")
    _receive_expect(inbox, SMALL, 7.0, "the send after the device had events again lost data")
    outbox.put("received")


def _out_of_events_producer(results: Any) -> None:
    to_cons, from_cons = Scenario().queue(), Scenario().queue()
    cons = spawn_reporting(results, "consumer", _out_of_events_consumer, to_cons, from_cons)
    ts = [torch.full((SMALL,), 7.0, device="npu:0") for _ in range(MAX_IPC + 1)]
    sent = [torch_npu_ipc.export_tensor(t) for t in ts[:MAX_IPC]]  # unclaimed: each holds its event
    c0 = aclsim.counters()
    with pytest.warns(UserWarning, match="npu:0 has no IPC event left"):
        sent.append(torch_npu_ipc.export_tensor(ts[-1]))
    assert delta(c0, aclsim.counters()).get("aclrtSynchronizeStream", 0) >= 1, "the send neither waited nor failed"
    st = torch_npu_ipc.sharing_stats()
    assert st["out_of_events_sends"] == 1 and st["live_slots"] == MAX_IPC + 1, st
    queued = torch.full((SMALL,), 8.0, device="npu:0")
    to_cons.put(queued)  # the feeder thread pickles it: must arrive, not be printed and dropped
    for d in sent:  # after it: nothing is claimed before the feeder ran
        to_cons.put(d)
    assert get(from_cons) == "received"
    assert torch_npu_ipc.sharing_stats()["out_of_events_sends"] == 2
    # The receiver claimed the first two: their events went back to the pool and serve this send.
    c0 = aclsim.counters()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        to_cons.put(torch_npu_ipc.export_tensor(ts[-1]))
    assert get(from_cons) == "received"
    d = delta(c0, aclsim.counters())
    assert d.get("ipc_event_create", 0) == 0 and d.get("aclrtSynchronizeStream", 0) == 0, d
    assert torch_npu_ipc.sharing_stats()["out_of_events_sends"] == 2
    del ts, queued
    _drain()
    cons.join(60)
    assert cons.exitcode == 0


@pytest.mark.parametrize("code", ["207007", "207001"])
def test_out_of_ipc_events_sends_synchronize(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """No IPC event left: sends synchronize and warn (a Queue's message arrives), events again after.

    With either error code for the limit (CANN documents the limit, not its code).
    """
    monkeypatch.setenv("ACLSIM_MAX_IPC_EVENTS", str(MAX_IPC))
    monkeypatch.setenv("ACLSIM_EVENT_LIMIT_ERROR", code)
    s = Scenario()
    s.also_expect("consumer")
    s.start("producer", _out_of_events_producer, s.results)
    s.finish(timeout=180)


# ------------------------------------------------------------------- no IPC events at all
def _no_ipc_events_consumer(inbox: Any, outbox: Any) -> None:
    c0 = aclsim.counters()
    t = get(inbox)  # pickled in the producer's Queue feeder thread
    assert torch.equal(t.cpu(), torch.full((SMALL,), 9.0)), "the tensor put on the Queue lost data"
    _receive_expect(inbox, SMALL, 10.0, "the send that synchronized lost the slow write")
    d = delta(c0, aclsim.counters())
    assert d.get("ipc_event_open", 0) == 0 and d.get("aclrtStreamWaitEvent", 0) == 0, d
    del t
    outbox.put("received")


def _no_ipc_events_producer(results: Any) -> None:
    assert "207000" in torch_npu_ipc._C._ipc_event_unsupported_reason(0)
    to_cons, from_cons = Scenario().queue(), Scenario().queue()
    cons = spawn_reporting(results, "consumer", _no_ipc_events_consumer, to_cons, from_cons)
    slow = torch.zeros(SMALL, device="npu:0")
    aclsim.sleep(torch.npu.current_stream(0).npu_stream, 0.3)
    slow.add_(10.0)  # behind 0.3 s of device work: the send must order the receiver after it
    c0 = aclsim.counters()
    with pytest.warns(UserWarning, match="npu:0 cannot share tensors with events: this NPU does not support"):
        data = torch_npu_ipc.export_tensor(slow)
    assert delta(c0, aclsim.counters()).get("aclrtSynchronizeStream", 0) >= 1, "the send did not synchronize"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per process
        torch_npu_ipc.import_tensor(torch_npu_ipc.export_tensor(slow))
    queued = torch.full((SMALL,), 9.0, device="npu:0")
    to_cons.put(queued)  # the feeder thread pickles it: must arrive, not be printed and dropped
    to_cons.put(data)
    assert get(from_cons) == "received"
    st = torch_npu_ipc.sharing_stats()
    assert st["no_ipc_event_sends"] == 3 and st["fallback_syncs"] == 3 and st["in_fallback"], st
    assert st["out_of_events_sends"] == 0 and st["inflight_events"] == 0, st
    del queued, slow
    _drain()
    cons.join(60)
    assert cons.exitcode == 0


def test_sharing_without_ipc_events_synchronizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a chip without IPC events, sends synchronize (one warning) and receivers wait on nothing.

    Before, every send raised "Interprocess events: not available here", where
    torch_npu's own sharing works by synchronizing.
    """
    monkeypatch.setenv("ACLSIM_IPC_EVENTS", "0")
    s = Scenario()
    s.also_expect("consumer")
    s.start("producer", _no_ipc_events_producer, s.results)
    s.finish(timeout=180)


def _side_stream_busy(seconds: float) -> torch.npu.Stream:
    """A new stream of npu:0 whose queue is held ``seconds`` by simulated device work."""
    side = torch.npu.Stream(device=0)
    aclsim.sleep(side.npu_stream, seconds)
    return side


def _wait_for_future_of(x: torch.Tensor) -> torch.Tensor:
    """``x`` through a device-aware Future, waited for on the current stream, which torch records it on."""
    fut = torch.futures.Future(devices=[x.device])
    fut.set_result(x)
    return fut.wait()


def _record_stream_on_a_shared_block() -> None:
    for how in ("record_stream", "copy to npu:1") + (("future",) if GUARD_WRAPPED else ()):
        x = torch.ones(LARGE, device="npu:0")
        # Share it (to this process itself) and let the receiver go: the storage keeps the
        # plugin's deleter, which torch_npu's allocator does not recognize as its own.
        torch_npu_ipc.import_tensor(torch_npu_ipc.export_tensor(x))
        _drain()
        addr = x.data_ptr()
        side = _side_stream_busy(1.0)
        with torch.npu.stream(side):
            if how == "record_stream":
                y = x * 2
                x.record_stream(side)
            elif how == "future":
                y = _wait_for_future_of(x) * 2  # torch records x on `side` (recordDataPtrOnStream)
            else:
                y = x.to("npu:1")  # the copy barrier marks x with `side` itself
        del x
        z = torch.zeros(LARGE, device="npu:0")  # the default stream: must not get x's block yet
        assert z.data_ptr() != addr, f"{how}: the block was reused while a side stream still read it"
        torch.npu.synchronize(0)
        torch.npu.synchronize(1)
        assert torch.equal(y.cpu(), torch.full((LARGE,), 1.0 if how == "copy to npu:1" else 2.0)), how
        del y, z


@pytest.mark.devices(2)
def test_record_stream_on_a_shared_block() -> None:
    """After a share, record_stream (and the copy barrier's own record) still defers the block's reuse."""
    s = Scenario()
    s.start("owner", _record_stream_on_a_shared_block)
    s.finish(timeout=180)


def _record_stream_producer(q: Any, back: Any) -> None:
    x = torch.arange(LARGE, dtype=torch.float32, device="npu:0")
    q.put(torch_npu_ipc.export_tensor(x))
    dropped_at = get(back)  # the receiver dropped its tensor; its side stream reads it for 1.5 s more
    time.sleep(max(0.0, dropped_at + 0.5 - time.time()))
    torch_npu_ipc.ipc_collect()
    st = torch_npu_ipc.sharing_stats()
    assert st["live_slots"] == 1, f"released while the receiver's side stream still read it: {st}"
    assert st["releasing_slots"] == 1, f"the drop is not known to be on its way: {st}"
    _drain()
    assert get(back) == "done"


def _record_stream_receiver(q: Any, back: Any, how: str) -> None:
    x = torch_npu_ipc.import_tensor(get(q))
    side = torch.npu.Stream(device=0)
    # Only the receiving (current) stream waits for the producer's write: without this, only the
    # sleep below kept side's read behind it (a producer's device 2 s behind gave y wrong values).
    side.wait_stream(torch.npu.current_stream(0))
    aclsim.sleep(side.npu_stream, 1.5)
    with torch.npu.stream(side):
        if how == "record_stream":
            y = x * 2
            x.record_stream(side)
        else:
            y = _wait_for_future_of(x) * 2
    del x
    torch.npu.current_stream(0).synchronize()  # the stream current at the drop is idle
    back.put(time.time())
    side.synchronize()
    assert torch.equal(y.cpu(), torch.arange(LARGE, dtype=torch.float32) * 2)
    back.put("done")


_NEEDS_WRAPPER = pytest.mark.skipif(not GUARD_WRAPPED, reason=NO_GUARD_WRAPPER)


@pytest.mark.parametrize("how", ["record_stream", pytest.param("future", marks=_NEEDS_WRAPPER)])
def test_record_stream_on_a_received_tensor(how: str) -> None:
    """A received tensor's slot is released only after the streams that recorded it finished.

    Recorded by ``Tensor.record_stream``, or by torch itself: a device-aware
    ``torch.futures.Future`` records its value on the stream that waits for it.
    """
    s = Scenario()
    q, back = s.queue(), s.queue()
    s.start("producer", _record_stream_producer, q, back)
    s.start("receiver", _record_stream_receiver, q, back, how)
    s.finish(timeout=180)


# ------------------------------------------------------------------- a send's states
def _slot_counts() -> tuple[int, int, int]:
    st = torch_npu_ipc.sharing_stats()
    return st["unreceived_slots"], st["releasing_slots"], st["live_slots"]


def _states_producer(q: Any, back: Any) -> None:
    x = torch.ones(SMALL, device="npu:0")
    desc = torch_npu_ipc.export_tensor(x)
    assert _slot_counts() == (1, 0, 1), "sent, not received"
    q.put(desc)
    assert get(back) == "held"
    assert _slot_counts() == (0, 0, 1), "received and held"
    q.put("drop")
    assert get(back) == "dropped"  # its stream reads x for 1.5 s more
    assert _slot_counts() == (0, 1, 1), "dropped, the release on its way"
    _drain()
    assert _slot_counts() == (0, 0, 0), "released"
    q.put("checked")


def _states_receiver(q: Any, back: Any) -> None:
    t = torch_npu_ipc.import_tensor(get(q))
    back.put("held")
    assert get(q) == "drop"
    aclsim.sleep(torch.npu.current_stream().npu_stream, 1.5)
    y = t + 1
    del t
    back.put("dropped")
    assert torch.equal(y.cpu(), torch.full((SMALL,), 2.0))
    assert get(q) == "checked"


def test_a_send_goes_through_its_states() -> None:
    """``sharing_stats`` tells a send not received, a tensor held, and a release on its way apart.

    The receiver marks its slot "releasing" when its storage dies, before its
    stream ran past the drop: what an exiting producer waits for.
    """
    s = Scenario()
    q, back = s.queue(), s.queue()
    s.start("producer", _states_producer, q, back)
    s.start("receiver", _states_receiver, q, back)
    s.finish(timeout=180)


# ------------------------------------------------------------------- the exit fence
def _fence_producer(q: Any, back: Any) -> None:
    x = torch.full((SMALL,), 2.0, device="npu:0")
    q.put(torch_npu_ipc.export_tensor(x))
    done_at = get(back)  # the receiver holds x; a side stream that recorded it reads it until done_at
    torch_npu_ipc._C._request_exit_fence()  # what an exiting producer asks first
    assert torch_npu_ipc.sharing_stats()["fenced_slots"] == 0, "fenced before the receiver's work ran"
    deadline = time.monotonic() + 60
    while torch_npu_ipc.sharing_stats()["fenced_slots"] == 0:
        assert time.monotonic() < deadline, "the receiver never answered the fence request"
        time.sleep(0.01)
    assert time.monotonic() >= done_at, "fenced while the side stream still had work queued on x"
    assert _slot_counts() == (0, 0, 1), "a fence is no release: the receiver still holds x"
    q.put("fenced")
    assert get(back) == "dropped"
    _drain()
    assert torch_npu_ipc.sharing_stats()["fenced_slots"] == 0 and _slot_counts() == (0, 0, 0), "released"
    q.put("checked")


def _fence_receiver(q: Any, back: Any, record: bool) -> None:
    x = torch_npu_ipc.import_tensor(get(q))
    side = torch.npu.Stream(device=0)
    side.wait_stream(torch.npu.current_stream(0))
    start = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes
    with torch.npu.stream(side):
        aclsim.sleep(side.npu_stream, 1.0)
        y = x * 2  # reads x behind 1 s of work on the side stream
    if record:
        x.record_stream(side)
    back.put(start + 1.0)  # the side stream's work ends after this
    assert get(q) == "fenced"
    assert torch.equal(y.cpu(), torch.full((SMALL,), 4.0))
    del x
    back.put("dropped")
    assert get(q) == "checked"


@pytest.mark.parametrize(
    ("record", "hide"),
    [(True, ""), (False, ""), (True, "aclrtSynchronizeDevice")],
    ids=["recorded", "not_recorded", "recorded_without_device_sync"],
)
def test_receiver_fences_held_tensors_when_asked(record: bool, hide: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer's exit fence request is answered once the work queued on a held tensor's device ran.

    Answered per slot (``sharing_stats()["fenced_slots"]``) by the receiver's fencer thread, which waits
    for the whole device: also a side stream the tensor was read on without ``record_stream``. Where the
    runtime lacks ``aclrtSynchronizeDevice`` (hidden here), it fences the streams it knows: the stream
    that received the tensor, those given to ``record_stream``, and the default stream. The slot stays
    live until the tensor is dropped and released.
    """
    s = Scenario()
    q, back = s.queue(), s.queue()
    s.start("producer", _fence_producer, q, back)
    if hide:
        monkeypatch.setenv("TORCH_NPU_IPC_ACL_HIDE", hide)  # for the receiver: spawn passes the environment on
    s.start("receiver", _fence_receiver, q, back, record)
    monkeypatch.delenv("TORCH_NPU_IPC_ACL_HIDE", raising=False)
    s.finish(timeout=180)


def _asking_producer(q: Any, ctl: Any, back: Any) -> None:
    x = torch.full((SMALL,), 1.0, device="npu:0")
    q.put(torch_npu_ipc.export_tensor(x))
    assert get(ctl) == "ask"
    torch_npu_ipc._C._request_exit_fence()
    back.put("asked")
    assert get(ctl) == "done"


def _releasing_producer(q: Any, ctl: Any, back: Any) -> None:
    x = torch.full((SMALL,), 2.0, device="npu:0")
    q.put(torch_npu_ipc.export_tensor(x))
    del x
    assert get(ctl) == "watch"
    deadline = time.monotonic() + 60
    while torch_npu_ipc.sharing_stats()["live_slots"]:
        assert time.monotonic() < deadline, "never released"
        time.sleep(0.005)
    back.put(time.monotonic())
    assert get(ctl) == "done"


def _two_producers_receiver(qa: Any, qb: Any, ca: Any, cb: Any, back: Any) -> None:
    xa = torch_npu_ipc.import_tensor(get(qa))
    side = torch.npu.Stream(device=0)
    with torch.npu.stream(side):
        xb = torch_npu_ipc.import_tensor(get(qb))
        yb = xb * 2
    torch.npu.synchronize()
    aclsim.sleep(torch.npu.current_stream(0).npu_stream, 3.0)
    ya = xa + 1  # A's tensor, read behind 3 s of work: answering A's request takes that long
    cb.put("watch")
    ca.put("ask")
    assert get(back) == "asked"
    time.sleep(0.2)  # the fencer saw the request (it looks every 20 ms) and waits for the device
    with torch.npu.stream(side):
        dropped = time.monotonic()
        del xb  # B's tensor, on an idle stream: its release owes nothing to A's fence
    released = get(back)
    assert released - dropped < 1.5, f"B's tensor was released {released - dropped:.2f} s after its drop"
    assert torch.equal(yb.cpu(), torch.full((SMALL,), 4.0)) and torch.equal(ya.cpu(), torch.full((SMALL,), 2.0))
    del xa
    ca.put("done")
    cb.put("done")


def test_a_fence_does_not_hold_back_other_releases() -> None:
    """Answering one producer's fence request (3 s of device work) does not delay another producer's release."""
    s = Scenario()
    qa, qb, ca, cb, back = s.queue(), s.queue(), s.queue(), s.queue(), s.queue()
    s.start("producer_a", _asking_producer, qa, ca, back)
    s.start("producer_b", _releasing_producer, qb, cb, back)
    s.start("receiver", _two_producers_receiver, qa, qb, ca, cb, back)
    s.finish(timeout=180)


FORKED_CHILD_EXITS = """
import os, time
import torch_npu_ipc, torch
import torch.multiprocessing as mp

def receiver(q, back):
    x = torch_npu_ipc.import_tensor(q.get(timeout=60))
    back.put("held")
    assert q.get(timeout=60) == "done"

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q, back = ctx.Queue(), ctx.Queue()
    r = ctx.Process(target=receiver, args=(q, back))
    r.start()
    x = torch.full((1024,), 1.0, device="npu:0")
    q.put(torch_npu_ipc.export_tensor(x))
    assert back.get(timeout=60) == "held"
    pid = os.fork()
    if pid == 0:  # inherits this process's tables; touches no NPU
        torch_npu_ipc._C._request_exit_fence()
        torch_npu_ipc.sharing._warn_if_shared_tensors_alive()  # what its exit runs
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.5)  # the receiver would have answered a request by now
    print("fenced after the child's exit:", torch_npu_ipc.sharing_stats()["fenced_slots"], flush=True)
    q.put("done")
    r.join(60)
"""


def test_a_forked_child_asks_no_fence_for_its_parent(tmp_path: Path) -> None:
    """A forked child inherits its parent's tables: its exit neither asks receivers to fence them nor warns."""
    script = tmp_path / "forked_child_exits.py"  # a file: spawned children import their target from it
    script.write_text(FORKED_CHILD_EXITS)
    r = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "fenced after the child's exit: 0" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "torch_npu_ipc: warning" not in r.stderr, r.stderr[-3000:]


VANISHED_PRODUCERS = """
import os, re, signal, sys, time
import torch_npu_ipc, torch
import torch.multiprocessing as mp

GONE = re.compile(r"torch_npu_ipc: warning: process (\\d+) ended without its exit wait .* holds (\\d+) tensor")

def make(i):
    return os.getpid(), torch.full((256,), float(i), device="npu:0")

def producer(q, back):
    q.put(torch.full((256,), 7.0, device="npu:0"))
    back.get(timeout=120)  # the receiver may hold it or drop it; "exit" ends normally, else killed meanwhile

def warnings_so_far(log):
    return [(int(p), int(n)) for p, n in GONE.findall(open(log).read())]

def wait_for_warning(log, pid, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [n for p, n in warnings_so_far(log) if p == pid]
        if found:
            return found
        time.sleep(0.05)
    return []

def start_producer(ctx):
    q, back = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=producer, args=(q, back))
    p.start()
    x = q.get(timeout=120)
    # The producer's record must have run before it is killed: a wait on the record of a process that
    # died first fails this process's stream for good (aclsim, as a dead recorder's event never completes).
    torch.npu.synchronize()
    return p, x, back

if __name__ == "__main__":
    log = sys.argv[1]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)  # this process's stderr, inherited by its children
    ctx = mp.get_context("spawn")

    # A Pool used as a context manager terminates its workers at the block's end.
    with ctx.Pool(2) as pool:
        out = pool.map(make, range(4))
        torch.npu.synchronize()  # the workers' records ran before they are terminated, as in start_producer
    workers = {pid for pid, _ in out}
    for pid in workers:
        held = sum(1 for p, _ in out if p == pid)
        assert wait_for_warning(log, pid) == [held], (pid, held, open(log).read())
    print("pool: warned", flush=True)

    # Killed while this process holds its tensor: warned.
    p, x, back = start_producer(ctx)
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    assert wait_for_warning(log, p.pid) == [1], open(log).read()
    print("killed while held: warned", flush=True)

    # Killed after this process dropped its tensor: nothing to say.
    p, x, back = start_producer(ctx)
    del x
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    time.sleep(1.0)  # the fencer looks every 20 ms
    assert p.pid not in {q for q, _ in warnings_so_far(log)}, open(log).read()
    print("killed after the drop: silent", flush=True)

    # A normal exit while held: the producer says so itself, after its exit wait; this process adds nothing.
    p, x, back = start_producer(ctx)
    back.put("exit")
    p.join(60)
    time.sleep(1.0)
    text = open(log).read()
    assert "is exiting while 1 tensor(s) it shared" in text, text
    assert p.pid not in {q for q, _ in warnings_so_far(log)}, text
    print("normal exit: only the producer warned", flush=True)
"""


def test_a_receiver_warns_when_a_producer_vanishes(tmp_path: Path) -> None:
    """A producer that ends without its exit wait (killed, a Pool's `with` block) while tensors are held: warned.

    Its memory goes with it on hardware, and it printed nothing; on aclsim
    the pages even stay readable. The receiver's fencer thread says so
    once per producer, with the count it holds. A producer that exits
    normally warns itself (no second warning), and one killed after the
    receiver dropped everything leaves nothing to say.
    """
    script = tmp_path / "vanished_producers.py"  # a file: spawned children import their target from it
    script.write_text(VANISHED_PRODUCERS)
    log = tmp_path / "stderr.log"
    r = subprocess.run(
        [sys.executable, str(script), str(log)], check=False, capture_output=True, text=True, timeout=300
    )
    err = log.read_text() if log.exists() else ""
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}\n{err[-3000:]}"
    assert "normal exit: only the producer warned" in r.stdout, r.stdout + err[-3000:]


PRODUCERS_STOPPED_BY_THE_EXIT = """
import atexit, time
atexit.register(time.sleep, 1.0)  # registered first, runs last: the fencer has time to see the workers gone

import torch_npu_ipc, torch
import torch.multiprocessing as mp

def make(i):
    return torch.full((256,), float(i), device="npu:0")

class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.full((256,), float(i), device="npu:0")

def worker_init(_):
    import torch_npu_ipc

if __name__ == "__main__":
    pool = mp.get_context("spawn").Pool(1)  # never closed: terminated by multiprocessing at exit
    out = pool.map(make, range(2))
    loader = torch.utils.data.DataLoader(
        Items(), batch_size=2, num_workers=1, persistent_workers=True, multiprocessing_context="spawn",
        worker_init_fn=worker_init,
    )
    for batch in loader:  # the last batch stays bound, as in any training script
        pass
    assert [float(t[0]) for t in out] == [0.0, 1.0] and float(batch[1, 0]) == 3.0
    print("done", flush=True)
"""


def test_producers_stopped_by_the_receivers_exit_are_not_reported(tmp_path: Path) -> None:
    """Daemonic producers multiprocessing terminates at the receiver's exit: no "ended without its exit wait".

    A DataLoader's persistent workers and a Pool never closed are stopped
    after atexit, while the main process still holds their last tensors
    (the last batch stays bound): the warning would follow every such
    program, though nothing can use those tensors any more.
    """
    script = tmp_path / "stopped_by_the_exit.py"  # a file: spawned children import their target from it
    script.write_text(PRODUCERS_STOPPED_BY_THE_EXIT)
    r = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    assert "done" in r.stdout, r.stdout + r.stderr[-3000:]
    assert "ended without its exit wait" not in r.stderr, r.stderr[-3000:]


@pytest.mark.mode_independent
def test_the_exit_warning_names_each_kinds_remedy() -> None:
    """The producer's exit warning counts held and unreceived tensors apart, with the remedy of each kind present."""
    held = torch_npu_ipc.sharing._exit_warning(1, 0)
    assert "exiting while 1 tensor(s)" in held and "(1) or not yet received or released (0)" in held, held
    assert "persistent_workers=True" in held and "TORCH_NPU_IPC_EXIT_GRACE_MS" not in held, held
    pending = torch_npu_ipc.sharing._exit_warning(0, 3)
    assert "exiting while 3 tensor(s)" in pending and "TORCH_NPU_IPC_EXIT_GRACE_MS (" in pending, pending
    assert "persistent_workers" not in pending, pending
    both = torch_npu_ipc.sharing._exit_warning(2, 2)
    assert "exiting while 4 tensor(s)" in both and "persistent_workers" in both and "EXIT_GRACE_MS" in both, both


# ------------------------------------------------------------------- release with no fence
MAX_EVENTS = 512  # ACLSIM_MAX_EVENTS for the next test: enough for torch_npu, few to exhaust


def _fenceless_producer(q: Any, back: Any) -> None:
    x = torch.arange(LARGE, dtype=torch.float32, device="npu:0")
    q.put(torch_npu_ipc.export_tensor(x))
    dropped_at = get(back)  # the receiver dropped it; its stream reads it for 1.5 s more
    time.sleep(max(0.0, dropped_at + 0.5 - time.time()))
    torch_npu_ipc.ipc_collect()
    assert torch_npu_ipc.sharing_stats()["live_slots"] == 1, "released while the receiver's stream still read it"
    _drain()
    q.put(torch_npu_ipc.export_tensor(x))  # received once the receiver has events again
    assert get(back) == "checked"
    _drain()
    q.put("released")
    assert get(back) == "done"


def _fenceless_receiver(q: Any, back: Any) -> None:
    x = torch_npu_ipc.import_tensor(get(q))
    stream = torch.npu.current_stream(0)
    side = torch.npu.Stream(device=0)  # made now: receiving on it needs a new fence
    aclsim.sleep(stream.npu_stream, 1.5)
    y = x * 2
    hoard = EventHoard(MAX_EVENTS)  # the releaser's fence cannot be created now
    del x
    back.put(time.time())
    deadline = time.monotonic() + 60
    while torch_npu_ipc.sharing_stats()["release_syncs"] == 0:
        assert time.monotonic() < deadline, "the release never fell back to a stream synchronize"
        time.sleep(0.05)
    desc = get(q)
    with torch.npu.stream(side), pytest.raises(RuntimeError, match="npu:0 has no event left"):
        torch_npu_ipc.import_tensor(desc)
    hoard.release()
    assert torch.equal(y.cpu(), torch.arange(LARGE, dtype=torch.float32) * 2)
    with torch.npu.stream(side):
        again = torch_npu_ipc.import_tensor(desc)  # the failed receive took nothing
        assert torch.equal(again.cpu(), torch.arange(LARGE, dtype=torch.float32))
    del again  # dropped on `side`, fenced this time
    back.put("checked")
    assert get(q) == "released"
    st = torch_npu_ipc.sharing_stats()
    assert st["release_syncs"] == 1, f"the fence was not created again once events were back: {st}"
    back.put("done")


def test_release_without_a_fence_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of events, the receiver's releaser synchronizes its stream: no early release, no lost data."""
    monkeypatch.setenv("ACLSIM_MAX_EVENTS", str(MAX_EVENTS))
    s = Scenario()
    q, back = s.queue(), s.queue()
    s.start("producer", _fenceless_producer, q, back)
    s.start("receiver", _fenceless_receiver, q, back)
    s.finish(timeout=180)


_DROP_AFTER_SEND = r"""
import torch_npu_ipc
import torch
import torch.multiprocessing as mp


def consumer(q, acks):
    import torch_npu_ipc  # noqa: F401

    while (t := q.get()) is not None:
        value = t[-1].item()
        del t  # let go at once: the producer's block is free to come back
        acks.put(value)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q, acks = ctx.SimpleQueue(), ctx.Queue()
    c = ctx.Process(target=consumer, args=(q, acks), daemon=True)
    c.start()
    n = 40  # x 8 MB through a 128 MB device: it holds fewer than 16 of them
    for i in range(n):
        t = torch.full((2 << 20,), float(i), device="npu:0")
        q.put(t)
        del t  # the usual producer loop: limbo holds the block until the consumer lets go
        assert acks.get(timeout=60) == float(i)
    q.put(None)
    c.join(60)
    stats = torch_npu_ipc.sharing_stats()
    print("sent", n, "limbo", stats["limbo_blocks"], "manual collects 0", flush=True)
"""


def test_out_of_memory_collects_what_receivers_let_go(tmp_path: Path) -> None:
    """A producer that drops each tensor after sending it never runs out while receivers let go.

    Dropped blocks wait in limbo until receivers release them, and the
    automatic collection on send counts blocks (64), not bytes: 16 blocks of
    8 MB fill a 128 MB device first. The allocator's free-memory callback
    (registered by the core, as torch.cuda registers its IPC collect) returns
    the released ones before the allocation fails; without it the 16th send
    raised OutOfMemoryError although no receiver held anything.
    """
    proc = run_script(tmp_path / "drop_after_send.py", _DROP_AFTER_SEND, ACLSIM_DEVICE_MEMORY_MB="128")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "sent 40" in proc.stdout


_RUN_AHEAD = """
import random

import aclsim
import torch_npu_ipc
import torch
import torch.multiprocessing as mp

N, NUMEL = 150, 1 << 20  # 4 MB float32 tensors, 600 MB in all, through a 256 MB device


def consumer(q, ready, out):
    import torch_npu_ipc  # noqa: F401

    ready.put("ready")
    window, seen = [], []
    rng = random.Random(0)
    while (t := q.get()) is not None:
        seen.append(t[:: NUMEL // 4].clone())  # read behind the wait on the producer's event
        window.append(t)
        if len(window) > 8:
            window.pop(rng.randrange(len(window)))  # dropped out of order; its release follows
    window.clear()
    out.put([s.cpu().tolist() for s in seen])


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q, ready, out = ctx.Queue(maxsize=16), ctx.Queue(), ctx.Queue()
    c = ctx.Process(target=consumer, args=(q, ready, out), daemon=True)
    c.start()
    assert ready.get(timeout=120) == "ready"
    # The device runs a second behind the host; receivers' streams wait on its events,
    # so their releases come no sooner.
    aclsim.sleep(torch.npu.current_stream().npu_stream, 1.0)
    for i in range(N):
        t = torch.full((NUMEL,), float(i), device="npu:0")
        q.put(t)
        del t
    q.put(None)
    seen = out.get(timeout=120)
    assert seen == [[float(i)] * 4 for i in range(N)], "a block was reused while a receiver still read it"
    print("sent", N, "waits", torch_npu_ipc.sharing_stats()["out_of_memory_waits"], flush=True)
"""


def test_out_of_memory_waits_for_releases_on_their_way(tmp_path: Path) -> None:
    """A producer running ahead of its device waits for receivers' releases instead of running out.

    A receiver's release follows the producer's device (its stream waits on
    the producer's later events before it reaches the drop), so the producer
    holds its device backlog's worth of blocks: here 150 sends of 4 MB
    through a 256 MB device that runs a second behind. When the device has
    less memory left than the releases on their way would return, the
    allocator's callback waits for them (``out_of_memory_waits``). Without
    that wait (``aclrtGetMemInfo`` hidden from the plugin) the same run
    runs out of memory; either way no block is reused under a reader.
    """
    script = tmp_path / "run_ahead.py"
    proc = run_script(script, _RUN_AHEAD, ACLSIM_DEVICE_MEMORY_MB="256")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    waits = int(proc.stdout.split("sent 150 waits ")[1].split()[0])
    assert waits > 0, proc.stdout
    proc = run_script(script, _RUN_AHEAD, ACLSIM_DEVICE_MEMORY_MB="256", TORCH_NPU_IPC_ACL_HIDE="aclrtGetMemInfo")
    # torch.OutOfMemoryError; a RuntimeError with the same text from older torch_npu (2.7.1)
    assert proc.returncode != 0 and "NPU out of memory" in proc.stderr, f"{proc.stdout}\n{proc.stderr[-3000:]}"


RECEIVE_WORK = 0.5  # s of device work the receiver queues on its receiving stream


def _side_stream_consumer(q: Any, back: Any) -> None:
    """Receive inside ``with torch.npu.stream(side)``, use it there, drop it after leaving the block."""
    side = torch.npu.Stream()
    for i in range(2):
        with torch.npu.stream(side):
            t = get(q)  # side waits for the producer's event
            aclsim.sleep(side.npu_stream, RECEIVE_WORK)
            total = t.sum()  # runs on side, after the sleep
        del t  # dropped with the default stream current: no record_stream(side) was made
        back.put(("dropped", i))
        side.synchronize()
        back.put(total.item())


def _side_stream_producer(results: Any) -> None:
    q, back = Scenario().queue(), Scenario().queue()
    cons = spawn_reporting(results, "consumer", _side_stream_consumer, q, back)
    for i in range(2):
        t = torch.full((LARGE,), 1.0, device="npu:0")
        q.put(t)
        del t
        assert get(back) == ("dropped", i)
        deadline = time.monotonic() + 10
        while torch_npu_ipc.ipc_collect() == 0:  # the block comes back once the receiver's side stream ran
            assert time.monotonic() < deadline, "the dropped tensor never came back"
            time.sleep(0.005)
        reuse = torch.empty(LARGE, device="npu:0")
        reuse.fill_(-5.0)  # lands in the block the receiver's side stream read
        assert get(back) == float(LARGE), "the producer reused the block before the receiver's stream read it"
        del reuse
    cons.join(60)


def test_the_receiving_stream_counts_as_a_use() -> None:
    """A tensor used on the stream it was received on and dropped outside it goes back only after that stream ran.

    The drop fenced only the stream current at the drop, so the producer got
    the block back while the side stream still had to read it, and the
    receiver summed -5 instead of 1. The receiving stream plays the part of
    the allocation stream now (fenced at the drop as record_stream's are).
    """
    s = Scenario()
    s.also_expect("consumer")
    s.start("producer", _side_stream_producer, s.results)
    s.finish(timeout=180)
