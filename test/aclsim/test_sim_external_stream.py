"""torch.npu.ExternalStream (native in torch_npu 2.13) over a stream made with raw aclrtCreateStream.

The raw stream is created on a helper thread: aclrtSetDevice sets the
calling thread's current device, and the pytest main thread belongs to
torch_npu, whose idea of the current device must not change under it.
"""

from __future__ import annotations

import ctypes
import os
import re
import time
from collections.abc import Callable

import pytest
import torch
import torch_npu  # noqa: F401  (registers the npu device)
from helpers import native_external_stream, on_device_thread, task_queue_on, torch_npu_version
from simacl import requires_aclsim

import aclsim

pytestmark = requires_aclsim

WORK = 0.3
# torch_npu itself refuses external streams when its per-stream task queue is on.
PER_STREAM_QUEUE_ON = bool(re.match(r"\s*[+-]?0*[1-9]", os.environ.get("PER_STREAM_QUEUE", ""))) and task_queue_on()


def _acl() -> ctypes.CDLL:
    lib = ctypes.CDLL("libascendcl.so")
    lib.aclrtSetDevice.argtypes = [ctypes.c_int32]
    lib.aclrtCreateStream.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.aclrtDestroyStream.argtypes = [ctypes.c_void_p]
    lib.aclrtSynchronizeStream.argtypes = [ctypes.c_void_p]
    return lib


def on_device(device: int, call: Callable[[ctypes.CDLL], dict[str, int]]) -> dict[str, int]:
    """Run ``call`` on a short-lived helper thread with ``device`` current; return what it reports."""
    lib = _acl()
    return on_device_thread(lib.aclrtSetDevice, device, lambda: call(lib), timeout=10)


def raw_stream(device: int) -> int:
    """aclrtCreateStream on `device`."""

    def make(lib: ctypes.CDLL) -> dict[str, int]:
        s = ctypes.c_void_p()
        return {"create": lib.aclrtCreateStream(ctypes.byref(s)), "ptr": s.value or 0}

    out = on_device(device, make)
    assert out["create"] == 0 and out["ptr"], out
    return out["ptr"]


def destroy_raw_stream(ptr: int, device: int) -> None:
    """Synchronize and destroy a raw stream of `device`, with that device current (CANN refuses it otherwise)."""
    out = on_device(
        device, lambda lib: {"sync": lib.aclrtSynchronizeStream(ptr), "destroy": lib.aclrtDestroyStream(ptr)}
    )
    assert out["sync"] == 0 and out["destroy"] == 0, out


@pytest.mark.skipif(PER_STREAM_QUEUE_ON, reason="torch_npu refuses external streams with PER_STREAM_QUEUE on")
@pytest.mark.skipif(
    not native_external_stream(), reason=f"torch_npu {torch_npu_version()} has no ExternalStream to run on aclsim"
)
@pytest.mark.parametrize("device", [0, pytest.param(1, marks=pytest.mark.devices(2))])
def test_external_stream_runs_ops(device: int) -> None:
    """ExternalStream(ptr) constructs, becomes current under `with`, and its ops run on the raw stream."""
    torch.npu.set_device(0)
    ptr = raw_stream(device)
    try:
        ext = torch.npu.ExternalStream(ptr, device=f"npu:{device}")
        assert ext.npu_stream == ptr
        assert ext.device == torch.device("npu", device)
        x = torch.arange(16, dtype=torch.float32, device=f"npu:{device}")
        torch.npu.synchronize(device)
        aclsim.sleep(ptr, WORK)  # the raw stream is busy: ops launched on it must queue behind
        t = time.monotonic()
        with torch.npu.device(device), torch.npu.stream(ext):
            assert torch.npu.current_stream().npu_stream == ptr
            y = x + 1
            y.mul_(2)
            z = y.clone()
        launch = time.monotonic() - t
        torch.npu.synchronize(device)
        took = time.monotonic() - t
        assert launch < WORK / 2, "launching on the external stream blocked the host"
        assert took >= WORK - 0.01, "ops did not run on the (busy) external stream"
        assert torch.equal(z.cpu(), (torch.arange(16, dtype=torch.float32) + 1) * 2)
        assert torch.npu.current_stream(device).npu_stream != ptr  # restored after `with`
    finally:
        destroy_raw_stream(ptr, device)
