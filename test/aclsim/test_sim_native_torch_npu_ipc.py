"""torch_npu 2.13's OWN inter-process paths on aclsim, between spawned processes.

- ``torch.npu.Event(interprocess=True)``: ``ipc_handle()`` in one process,
  ``torch.npu.Event.from_ipc_handle(device, handle)`` in another.
- An npu tensor through a spawn ``torch.multiprocessing`` Queue, rebuilt by
  torch_npu's own reductions (aclrtIpcMemGetExportKey/ImportByKey plus an IPC
  event the consumer's stream waits on).

These are the baseline the plugin is benchmarked against, so they must work
on the simulator unchanged. The workers import torch (spawned children pay
for the import), so each test uses one producer and one consumer.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
import torch_npu  # noqa: F401  (registers the npu device)
from helpers import native_event_ipc, run_processes, torch_npu_version
from simacl import requires_aclsim

import aclsim

pytestmark = [
    requires_aclsim,
    pytest.mark.skipif(
        not native_event_ipc(), reason=f"torch_npu {torch_npu_version()} has no event IPC of its own to run on aclsim"
    ),
]

WORK = 0.3
SLACK = 0.01


def producer(to_cons: Any, to_prod: Any) -> None:
    """Device 0: an interprocess event exchange, then npu tensors through the queue."""
    torch.npu.set_device(0)
    s = torch.npu.current_stream()

    # 1. Event(interprocess=True): record behind WORK seconds, then wait for the consumer's record.
    ev = torch.npu.Event(interprocess=True)
    handle = ev.ipc_handle()
    assert isinstance(handle, bytes) and len(handle) == 64
    to_cons.put(handle)
    assert to_prod.get(timeout=60) == "opened"
    aclsim.sleep(s.npu_stream, WORK)
    t_issue = time.monotonic()
    ev.record(s)
    # torch_npu's record may still sit in its task queue, and a wait binds to the record that
    # is current when the wait is issued: hand the record to the runtime before telling the
    # consumer (reading npu_stream drains the queue; no device sync).
    _ = s.npu_stream
    to_cons.put(t_issue)
    kind, t_back = to_prod.get(timeout=60)
    assert kind == "back"
    ev.wait(s)
    s.synchronize()
    assert time.monotonic() >= t_back + WORK - SLACK, "producer released before the consumer's record ran"

    # 2. Tensors whose last write is still queued behind device work.
    t = torch.zeros(1024, device="npu:0")
    view = torch.arange(40, dtype=torch.int64, device="npu:0").reshape(5, 8)[1:4, ::2]
    aclsim.sleep(s.npu_stream, WORK)
    t.fill_(7)  # runs only after WORK seconds
    t_issue = time.monotonic()
    to_cons.put((t, view, t_issue))
    assert to_prod.get(timeout=60) == "read"
    # The consumer wrote into the shared storage; the producer sees it.
    torch.npu.synchronize()
    assert torch.equal(t[:3].cpu(), torch.tensor([-1.0, -2.0, -3.0]))
    to_cons.put("ok")
    assert to_prod.get(timeout=60) == "bye"


def consumer(device: int, to_cons: Any, to_prod: Any, results: Any) -> None:
    """Runs on `device`: opens the event, then rebuilds tensors with torch_npu's reductions."""
    torch.npu.set_device(device)
    s = torch.npu.current_stream()
    out: dict[str, Any] = {}

    handle = to_cons.get(timeout=60)
    ev = torch.npu.Event.from_ipc_handle(device, handle)
    before = aclsim.counters()
    to_prod.put("opened")
    t_issue = to_cons.get(timeout=60)
    ev.wait(s)
    x = torch.ones(4, device=f"npu:{device}")
    x.add_(1)  # queued behind the wait
    t_wait = time.monotonic()
    got = x.cpu()
    t_rel = time.monotonic()
    out["event_values"] = bool(torch.equal(got, torch.full((4,), 2.0)))
    out["event_wait_issued_early"] = t_wait < t_issue + WORK
    out["event_released_after"] = t_rel - t_issue
    aclsim.sleep(s.npu_stream, WORK)
    t_back = time.monotonic()
    ev.record(s)
    _ = s.npu_stream  # the record reaches the runtime before the producer's wait is issued
    to_prod.put(("back", t_back))
    s.synchronize()  # drains torch_npu's task queue: the record reached the runtime
    after = aclsim.counters()
    out["event_counts"] = {k: after[k] - before.get(k, 0) for k in after}

    before = aclsim.counters()
    t, view, t_issue = to_cons.get(timeout=60)
    out["tensor_device"] = str(t.device)
    got = t.cpu()
    out["tensor_waited"] = time.monotonic() - t_issue
    out["tensor_values"] = bool(torch.equal(got, torch.full((1024,), 7.0)))
    out["view_values"] = view.shape == (3, 4) and bool(
        torch.equal(view.cpu(), torch.arange(40, dtype=torch.int64).reshape(5, 8)[1:4, ::2])
    )
    t[:3].copy_(torch.tensor([-1.0, -2.0, -3.0]))
    torch.npu.synchronize()
    after = aclsim.counters()
    out["tensor_counts"] = {k: after[k] - before.get(k, 0) for k in after}
    to_prod.put("read")
    assert to_cons.get(timeout=60) == "ok"
    results.put(out)
    del t, view
    to_prod.put("bye")


@pytest.mark.parametrize(
    "device", [0, pytest.param(1, marks=pytest.mark.devices(2))], ids=["consumer-on-npu0", "consumer-on-npu1"]
)
def test_native_event_and_tensor_ipc(device: int) -> None:
    """Interprocess Event both ways, then an npu tensor and a strided view through a spawn Queue."""
    ctx = mp.get_context("spawn")
    to_cons, to_prod, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    run_processes([(producer, (to_cons, to_prod)), (consumer, (device, to_cons, to_prod, results))], timeout=90)
    out = results.get(timeout=5)
    # Event(interprocess=True) / from_ipc_handle.
    assert out["event_values"]
    assert out["event_wait_issued_early"], "wait issued after the producer's work: the check would be vacuous"
    assert out["event_released_after"] >= WORK - SLACK, out
    assert out["event_counts"]["aclrtStreamWaitEvent"] >= 1
    assert out["event_counts"]["aclrtRecordEvent"] >= 1
    # Tensor through the queue with torch_npu's own reductions.
    assert out["tensor_device"] == "npu:0"
    assert out["tensor_values"], "consumer read the storage before the producer's fill_ ran"
    assert out["view_values"]
    assert out["tensor_waited"] >= WORK - SLACK, out
    counts = out["tensor_counts"]
    assert counts["ipc_mem_import"] >= 1
    assert counts["ipc_event_open"] >= 1
    assert counts["aclrtStreamWaitEvent"] >= 1
