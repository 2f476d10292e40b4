"""aclsim.counters() / reset_counters(): per-process call counts that let tests prove what a path did."""

from __future__ import annotations

import pytest
import torch
import torch_npu  # noqa: F401  (registers the npu device)
from simacl import requires_aclsim

import aclsim

pytestmark = requires_aclsim

EXPECTED_NAMES = {
    "aclrtSynchronizeStream",
    "aclrtSynchronizeEvent",
    "aclrtSynchronizeDevice",
    "aclrtStreamWaitEvent",
    "aclrtRecordEvent",
    "aclrtQueryEventStatus",
    "event_create",
    "event_destroy",
    "memcpy_host_to_host",
    "memcpy_host_to_device",
    "memcpy_device_to_host",
    "memcpy_device_to_device",
    "memcpy_inter_device",
    "ipc_event_create",
    "ipc_event_open",
    "ipc_event_destroy",
    "ipc_event_get_handle",
    "ipc_mem_export",
    "ipc_mem_import",
    "ipc_mem_close",
    "device_malloc",
    "device_free",
    "stream_create",
    "stream_destroy",
    "op_launch",
}


@pytest.fixture(autouse=True)
def _quiet_device() -> None:
    torch.npu.set_device(0)
    torch.npu.synchronize()


def drain(stream: torch.npu.Stream) -> None:
    """Push everything torch_npu queued for `stream` into the runtime, without synchronizing."""
    assert stream.npu_stream


def test_names_and_reset() -> None:
    """Every documented counter exists; reset_counters() zeroes all of them."""
    torch.ones(4, device="npu:0").cpu()
    c = aclsim.counters()
    assert EXPECTED_NAMES <= set(c), EXPECTED_NAMES - set(c)
    assert all(isinstance(v, int) and v >= 0 for v in c.values())
    assert any(c.values())
    aclsim.reset_counters()
    assert not any(aclsim.counters().values())


def test_stream_synchronize_counts() -> None:
    """A plain stream.synchronize() increments aclrtSynchronizeStream."""
    aclsim.reset_counters()
    torch.npu.current_stream().synchronize()
    assert aclsim.counters()["aclrtSynchronizeStream"] >= 1
    aclsim.reset_counters()
    torch.npu.synchronize()
    c = aclsim.counters()
    assert c["aclrtSynchronizeDevice"] == 1


def test_op_launch_does_not_block_the_host() -> None:
    """Launching ops counts op_launch and no synchronize of any kind."""
    x = torch.zeros(32, device="npu:0")
    s = torch.npu.current_stream()
    drain(s)
    aclsim.reset_counters()
    x.add_(1)
    x.mul_(3)
    drain(s)
    c = aclsim.counters()
    assert c["op_launch"] >= 2
    assert c["aclrtSynchronizeStream"] == 0
    assert c["aclrtSynchronizeDevice"] == 0
    assert c["aclrtSynchronizeEvent"] == 0


@pytest.mark.devices(2)
def test_events_and_copies_count() -> None:
    """Record/wait and each copy kind land in their counters."""
    s1, s2 = torch.npu.Stream(), torch.npu.Stream()
    host = torch.arange(64, dtype=torch.float32)
    aclsim.reset_counters()
    ev = torch.npu.Event()
    ev.record(s1)
    s2.wait_event(ev)
    drain(s1)
    drain(s2)
    c = aclsim.counters()
    assert c["aclrtRecordEvent"] == 1
    assert c["aclrtStreamWaitEvent"] == 1
    assert c["event_create"] == 1

    aclsim.reset_counters()
    d0 = host.to("npu:0")
    assert aclsim.counters()["memcpy_host_to_device"] >= 1
    d1 = d0.to("npu:1")
    torch.npu.synchronize(1)
    assert aclsim.counters()["memcpy_inter_device"] >= 1
    back = d1.cpu()
    assert aclsim.counters()["memcpy_device_to_host"] >= 1
    assert torch.equal(back, host)
