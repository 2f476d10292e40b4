"""The runtime's error messages: the plugin reads the ones it handles, and errors carry the rest.

CANN's ``aclGetRecentErrMsg`` returns and clears every message not read yet,
so a failure the plugin handles itself (a probe, "no device set on this
thread yet", peer access already enabled) must be read and dropped there;
otherwise it would head the next error torch_npu or the user reports, about
something else. Runs on aclsim, whose ``aclGetRecentErrMsg`` follows that
contract (test/aclsim/test_sim_cann_rules.py).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import pytest
import torch

import aclsim
import torch_npu_ipc
from aclsim._env import runtime

pytestmark = pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)")


def unread() -> str | None:
    """The calling thread's unread runtime messages (reading them clears them)."""
    fn = runtime().aclGetRecentErrMsg
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    msg = fn()
    return msg.decode(errors="replace") if msg else None


def _steps() -> dict[str, str | None]:
    """Plugin calls whose internals include failures the plugin handles; what each left unread."""
    left: dict[str, str | None] = {}
    unread()  # start clean
    x = torch.arange(1024, dtype=torch.float32, device="npu:0")
    y = x.to("npu:1")  # peer access: "already enabled" is handled
    torch.npu.synchronize(1)
    assert torch.equal(y.cpu(), x.cpu())
    left["cross-device copy"] = unread()

    e = torch_npu_ipc.Event(interprocess=True)
    e.record()
    opened = torch_npu_ipc.Event.from_ipc_handle(1, e.ipc_handle())
    with torch.npu.device(1):
        opened.wait()
    torch.npu.synchronize(1)
    left["interprocess event"] = unread()

    t = torch_npu_ipc.import_tensor(torch_npu_ipc.export_tensor(x))
    assert torch.equal(t.cpu(), x.cpu())
    del t
    torch_npu_ipc.ipc_collect()
    left["share and release"] = unread()

    other = torch.npu.Stream(device=2)
    # The owner is found by trying the other devices in turn: npu:0 refuses, npu:2 takes it.
    with pytest.raises(ValueError, match="is a stream of npu:2"):
        torch_npu_ipc.ExternalStream(other.npu_stream, device=1)
    left["wrong-device ExternalStream"] = unread()
    return left


@pytest.mark.devices(3)
def test_handled_failures_leave_no_message() -> None:
    """After copies, events, sharing and a refused ExternalStream, no runtime message waits to be read."""
    left = _steps()
    assert left == dict.fromkeys(left), left

    # A thread with no device set: the plugin's device guards ask the runtime which is current.
    result: dict[str, object] = {}

    def fresh_thread() -> None:
        try:
            unread()
            x = torch.ones(16, device="npu:0")
            y = x.to("npu:1")
            torch.npu.synchronize(1)
            result["data"] = y.sum().item()
            result["left"] = unread()
        except BaseException as exc:  # reported below
            result["error"] = exc

    th = threading.Thread(target=fresh_thread)
    th.start()
    th.join(120)
    assert not th.is_alive(), "the copy from a fresh thread hung"
    assert "error" not in result, result.get("error")
    assert result == {"data": 16.0, "left": None}


def test_first_call_with_a_bad_device_names_it() -> None:
    """``torch.npu.set_device(5)`` as a process's first NPU call raises RuntimeError with the runtime's reason.

    Before, aclsim freed the message torch_npu had just read (torch_npu calls
    aclrtGetDevice, which failed, before copying it): UnicodeDecodeError on
    freed bytes, and the reason lost on the second try.
    """
    code = """
import torch_npu_ipc, torch
for _ in range(2):
    try:
        torch.npu.set_device(5)
    except RuntimeError as exc:
        print("device 5 does not exist" in str(exc))
    else:
        print("no error")
"""
    env = dict(os.environ, ACLSIM_DEVICES="2")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True", "True"], r.stdout + r.stderr[-2000:]
