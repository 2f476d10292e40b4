"""torch.npu.ExternalStream (native in torch_npu 2.13) over a stream made with raw aclrtCreateStream.

The raw stream is created on a helper thread: aclrtSetDevice sets the
calling thread's current device, and the pytest main thread belongs to
torch_npu, whose idea of the current device must not change under it.
"""

from __future__ import annotations

import ctypes
import threading
import time

import pytest
import torch
import torch_npu  # noqa: F401  (registers the npu device)
from simacl import requires_aclsim

import aclsim

pytestmark = requires_aclsim

WORK = 0.3


def _acl() -> ctypes.CDLL:
    lib = ctypes.CDLL("libascendcl.so")
    lib.aclrtSetDevice.argtypes = [ctypes.c_int32]
    lib.aclrtCreateStream.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.aclrtDestroyStream.argtypes = [ctypes.c_void_p]
    lib.aclrtSynchronizeStream.argtypes = [ctypes.c_void_p]
    return lib


def raw_stream(device: int) -> int:
    """aclrtCreateStream on `device`, from a short-lived helper thread."""
    out: dict[str, int] = {}

    def make() -> None:
        lib = _acl()
        out["set"] = lib.aclrtSetDevice(device)
        s = ctypes.c_void_p()
        out["create"] = lib.aclrtCreateStream(ctypes.byref(s))
        out["ptr"] = s.value or 0

    t = threading.Thread(target=make)
    t.start()
    t.join(10)
    assert out.get("set") == 0 and out.get("create") == 0 and out["ptr"], out
    return out["ptr"]


def destroy_raw_stream(ptr: int) -> None:
    """Synchronize and destroy a raw stream."""
    lib = _acl()
    assert lib.aclrtSynchronizeStream(ptr) == 0
    assert lib.aclrtDestroyStream(ptr) == 0


@pytest.mark.parametrize("device", [0, 1])
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
        destroy_raw_stream(ptr)
