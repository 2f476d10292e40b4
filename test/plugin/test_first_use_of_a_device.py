"""The plugin's entry points on a device the process has not used yet.

torch_npu 2.13 sets a device's streams up on their first use with that
device current: until then ``torch.npu.current_stream(i)`` and
``torch.npu.default_stream(i)`` raise "Uninitialized default NPU stream for
device " (docs/troubleshooting.md; 2.7.1 sets them up at once). A copy
into such a device, a tensor or an event received for it, and an imported
descriptor must work all the same, in a fresh interpreter where nothing
touched those devices before.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_script, torch_npu_version

import aclsim

pytestmark = [
    pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)"),
    pytest.mark.devices(4),
]

_SCRIPT = r"""
import torch_npu_ipc
import torch
import torch.multiprocessing as mp


def consumer(q, r):
    import torch_npu_ipc  # noqa: F401  (a spawned child: its own import)
    import torch

    t = q.get()  # a tensor on npu:2, which this process never used
    h = q.get()  # the handle of an event on npu:3
    data = q.get()  # a descriptor of a tensor on npu:1
    e = torch_npu_ipc.Event.from_ipc_handle(3, h)
    e.wait()  # the current stream of npu:0, not used either
    e.wait(torch.npu.Stream(device=1))
    imported = torch_npu_ipc.import_tensor(data)
    r.put((str(t.device), t.sum().item(), str(imported.device), imported.sum().item()))
    del t, imported
    torch.npu.synchronize(0)


if __name__ == "__main__":
    try:
        torch.npu.current_stream(3)
        print("quirk: none")
    except RuntimeError as err:
        print("quirk:", "Uninitialized default NPU stream" in str(err))
    with torch.npu.device(3):
        torch.npu.current_stream()  # the workaround troubleshooting.md gives
    print("workaround:", torch.npu.current_stream(3).device)

    x = torch.arange(1000, dtype=torch.float32, device="npu:0")
    print("to:", x.to("npu:1").sum().item() == x.sum().item())

    ctx = mp.get_context("spawn")
    q, r = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=consumer, args=(q, r))
    p.start()
    shared = torch.full((64,), 2.0, device="npu:2")
    q.put(shared)
    e = torch_npu_ipc.Event(interprocess=True)
    with torch.npu.device(3):
        e.record()
    q.put(e.ipc_handle())
    exported = torch.full((8,), 3.0, device="npu:1")
    q.put(torch_npu_ipc.export_tensor(exported))
    print("received:", r.get(timeout=120))
    p.join(120)
    print("exit:", p.exitcode)
"""


def test_entry_points_on_devices_the_process_has_not_used(tmp_path: Path) -> None:
    """Copies, received tensors and events, and imports set a fresh device up themselves."""
    proc = run_script(tmp_path / "first_use.py", _SCRIPT, ACLSIM_DEVICES="4")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    # torch_npu's own behaviour, which docs/troubleshooting.md describes: update the docs if it changed.
    quirk = {"2.13": "True", "2.7.": "none"}.get(torch_npu_version()[:4])
    if quirk is not None:
        assert lines["quirk"] == quirk, (torch_npu_version(), proc.stdout)
    assert lines["workaround"] == "npu:3", proc.stdout
    assert lines["to"] == "True", proc.stdout
    assert lines["received"] == "('npu:2', 128.0, 'npu:1', 24.0)", proc.stdout
    assert lines["exit"] == "0", proc.stdout
