"""A receiver dies and its pid is reused at once; run as pid 1 of a fresh pid namespace by ``test_pid_reuse.py``.

    python pidreuse_job.py

The producer (this process) shares a tensor with a spawned receiver, which
claims it and is then killed with SIGKILL. The job hands the receiver's pid
to a new process at once (writing ``/proc/sys/kernel/ns_last_pid``, which
pid 1 of a pid namespace may do), so a check by pid alone would take the
slot's holder for alive forever. ``ipc_collect()`` must reclaim the slot
anyway: the claimer's start time no longer matches. Prints ``reclaimed in
<seconds>`` and exits 0 on success.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import torch_npu_ipc

# isort: split
import torch
import torch.multiprocessing as mp

TIMEOUT = 60.0


def _receiver(inbox: Any, outbox: Any) -> None:
    t = torch_npu_ipc.import_tensor(inbox.get(timeout=TIMEOUT))
    assert torch.equal(t.cpu(), torch.full((1024,), 3.0))
    outbox.put(os.getpid())
    time.sleep(TIMEOUT)  # holds the tensor until killed


def _take_pid(pid: int) -> subprocess.Popen[bytes]:
    """Start a process that gets exactly ``pid`` (the kernel hands out ns_last_pid + 1 next)."""
    for _ in range(20):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen(["sleep", str(TIMEOUT)])
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    raise SystemExit(f"could not start a process with pid {pid}")


def main() -> None:
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    receiver = ctx.Process(target=_receiver, args=(inbox, outbox))
    receiver.start()
    t = torch.full((1024,), 3.0, device="npu:0")
    inbox.put(torch_npu_ipc.export_tensor(t))
    pid = outbox.get(timeout=TIMEOUT)
    assert pid == receiver.pid
    assert torch_npu_ipc.sharing_stats()["live_slots"] == 1
    os.kill(pid, signal.SIGKILL)
    receiver.join(TIMEOUT)  # reaped: the pid is free
    impostor = _take_pid(pid)
    try:
        start = time.monotonic()
        while torch_npu_ipc.sharing_stats()["live_slots"]:
            if time.monotonic() - start > 10:
                raise SystemExit(f"the dead receiver's slot was not reclaimed while pid {pid} runs another program")
            torch_npu_ipc.ipc_collect()
            time.sleep(0.05)
        print(f"reclaimed in {time.monotonic() - start:.2f} s while pid {pid} was reused", flush=True)
    finally:
        impostor.kill()
        impostor.wait()
    del t
    assert torch_npu_ipc.ipc_collect() >= 0


if __name__ == "__main__":
    assert os.getpid() == 1, "run as pid 1 of a new pid namespace (unshare --pid --fork --mount-proc)"
    main()
    sys.exit(0)
