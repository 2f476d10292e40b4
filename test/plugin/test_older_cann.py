"""On a CANN runtime without a function the plugin needs, each feature says so and names the fix.

The last test runs on a chip whose runtime has every function but refuses
IPC events (aclsim's ``ACLSIM_IPC_EVENTS=0``, as CANN on a chip without
them).

``TORCH_NPU_IPC_ACL_HIDE`` makes the plugin's ACL table treat the listed
functions as missing from libascendcl.so, as on an older CANN / NPU driver.
Each scenario runs in a fresh interpreter (the table is resolved once per
process) on aclsim with two devices.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import aclsim

pytestmark = pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)")

UPGRADE = "Upgrade the CANN toolkit"


def run(code: str, hide: str, **extra_env: str) -> str:
    """Run ``code`` with ``hide`` hidden from the plugin; return its stdout (it must exit 0)."""
    env = dict(os.environ, TORCH_NPU_IPC_ACL_HIDE=hide, **extra_env)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.mark.parametrize("missing", ["aclrtIpcGetEventHandle", "aclrtIpcOpenEventHandle", "aclrtCreateEventExWithFlag"])
def test_interprocess_event_names_the_missing_function(missing: str) -> None:
    out = run(
        f"""
import torch_npu_ipc, torch
try:
    e = torch_npu_ipc.Event(interprocess=True)
    e.record()
    h = e.ipc_handle()
    torch_npu_ipc.Event.from_ipc_handle(0, h)
except RuntimeError as exc:
    msg = str(exc)
    head = "Interprocess events: not supported by this CANN runtime ("
    assert msg.startswith(head + {missing!r} + " is missing"), msg
    print("RAISED", msg.splitlines()[0])
else:
    raise SystemExit("no error")
reason = torch_npu_ipc._C._ipc_event_unsupported_reason(0)
assert {missing!r} in reason and "upgrade" in reason, reason
# plain (non-interprocess) events are torch_npu's and keep working
p = torch_npu_ipc.Event()
p.record()
p.synchronize()
print("OK")
""",
        missing,
    )
    assert "RAISED" in out and UPGRADE in out and out.rstrip().endswith("OK")


@pytest.mark.devices(2)
def test_copies_fall_back_to_synchronize_and_say_why() -> None:
    out = run(
        """
import aclsim, torch_npu_ipc, torch
from torch_npu_ipc import copies
import warnings
x = torch.arange(1000, dtype=torch.float32, device="npu:0")
before = aclsim.counters().get("aclrtSynchronizeStream", 0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = x.to("npu:1")
    z = torch.empty(1000, device="npu:0")
    z.copy_(y)
said = [str(w.message) for w in caught if "cross-device copies synchronize" in str(w.message)]
assert len(said) == 1 and "aclrtIpcGetEventHandle is missing" in said[0], [str(w.message) for w in caught]
assert torch.equal(z.cpu(), torch.arange(1000, dtype=torch.float32))
st = copies.status()
assert st["path"] == "synchronize", st
assert "aclrtIpcGetEventHandle" in st["fallback_reason"], st
assert st["sync_copies"] >= 2 and st["event_copies"] == 0, st
assert aclsim.counters()["aclrtSynchronizeStream"] >= before + 4
print("OK")
""",
        "aclrtIpcGetEventHandle",
    )
    assert out.rstrip().endswith("OK")


def test_doctor_reports_the_probe() -> None:
    env = dict(os.environ, TORCH_NPU_IPC_ACL_HIDE="aclrtIpcOpenEventHandle")
    r = subprocess.run(
        [sys.executable, "-m", "torch_npu_ipc", "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "IPC events     UNSUPPORTED: aclrtIpcOpenEventHandle is missing" in r.stdout, r.stdout
    assert "stream synchronize" in r.stdout and "aclrtIpcOpenEventHandle" in r.stdout, r.stdout
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("interprocess Event"))
    assert "unavailable: aclrtIpcOpenEventHandle is missing" in line, line
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("tensor sharing"))
    assert "each send synchronizes the producer's stream: aclrtIpcOpenEventHandle is missing" in line, line


def test_sharing_without_ipc_memory_names_the_function() -> None:
    out = run(
        """
import torch_npu_ipc, torch
t = torch.ones(4, device="npu:0")
try:
    torch_npu_ipc.export_tensor(t)
except RuntimeError as exc:
    assert "aclrtIpcMemGetExportKey" in str(exc) and "Upgrade" in str(exc), str(exc)
    print("OK")
""",
        "aclrtIpcMemGetExportKey",
    )
    assert out.rstrip().endswith("OK")


@pytest.mark.devices(2)
def test_a_chip_without_ipc_events() -> None:
    """Every function is there but the chip refuses IPC events (207000): each feature falls back or says why.

    Interprocess events raise; sharing and cross-device copies synchronize.

    Before the plugin checked its probe there, an interprocess Event and each
    send reported "no IPC event left" (the out-of-events path) instead.
    """
    out = run(
        """
import aclsim, pickle, torch_npu_ipc, torch
from torch_npu_ipc import copies, reductions
reason = torch_npu_ipc._C._ipc_event_unsupported_reason(0)
assert reason.startswith("this NPU does not support interprocess events") and "207000" in reason, reason
try:
    torch_npu_ipc.Event(interprocess=True).record()
except RuntimeError as exc:
    assert "does not support interprocess events" in str(exc), str(exc)
else:
    raise SystemExit("Event(interprocess=True) worked")
try:
    torch_npu_ipc.Event.from_ipc_handle(0, bytes(64))
except RuntimeError as exc:
    assert "not available here: this NPU does not support interprocess events" in str(exc), str(exc)
else:
    raise SystemExit("from_ipc_handle worked")
# Sharing synchronizes instead (test_plugin_sharing_lifetimes.py has the cross-process test).
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    shared = torch_npu_ipc.import_tensor(torch_npu_ipc.export_tensor(torch.full((4,), 3.0, device="npu:0")))
assert torch.equal(shared.cpu(), torch.full((4,), 3.0))
assert any("cannot share tensors with events" in str(w.message) for w in caught), [str(w.message) for w in caught]
assert torch_npu_ipc.sharing_stats()["no_ipc_event_sends"] == 1
# torch_npu 2.13 gives an all-zero handle for a plain event here ("not supported" is only logged);
# older releases have no ipc_handle() at all.
plain = torch.npu.Event()
plain.record()
try:
    reductions.reduce_event(plain)
except RuntimeError as exc:
    want = "empty IPC handle" if hasattr(plain, "ipc_handle") else "has no ipc_handle()"
    assert want in str(exc) and "interprocess=True" in str(exc), str(exc)
else:
    raise SystemExit("a plain event was reduced")
x = torch.arange(1000, dtype=torch.float32, device="npu:0")
before = aclsim.counters().get("aclrtSynchronizeStream", 0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = x.to("npu:1")
said = [str(w.message) for w in caught if "cross-device copies synchronize" in str(w.message)]
assert len(said) == 1 and "does not support interprocess events" in said[0], [str(w.message) for w in caught]
assert torch.equal(y.cpu(), torch.arange(1000, dtype=torch.float32))
st = copies.status()
assert st["path"] == "synchronize" and "does not support interprocess events" in st["fallback_reason"], st
assert st["event_copies"] == 0 and aclsim.counters()["aclrtSynchronizeStream"] >= before + 2
print("OK")
""",
        "",
        ACLSIM_IPC_EVENTS="0",
    )
    assert out.rstrip().endswith("OK")
