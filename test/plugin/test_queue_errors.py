"""A failed torch_npu task queue's report reaches the user, also when a thread of the plugin drained the queue first.

torch_npu reports a failure of its task queue once, to the first call that drains or enqueues on it, and
then drops later work on that queue without an error. The plugin's releaser thread drains queues when a
receiver drops a tensor: if it comes first, it receives the report. The plugin keeps it, prints it, and
raises it from every later copy touching an NPU and every ``Tensor.item()`` of one (results are read
through those).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import aclsim

pytestmark = [
    pytest.mark.skipif(not aclsim.is_active(), reason="needs aclsim (its unimplemented operators fail in the queue)"),
    pytest.mark.mode_independent,  # each case sets its own queue mode
]


def _kept(stderr: str) -> list[str]:
    """The plugin's lines about a failed queue's report it kept."""
    return [ln for ln in stderr.splitlines() if ln.startswith("torch_npu_ipc: error:")]


def _assert_reads_raise(stdout: str, steps: tuple[str, ...]) -> None:
    """Each read step of the script raised the kept report, naming the failed operator."""
    for step in steps:
        line = next(ln for ln in stdout.splitlines() if ln.startswith(step + " "))
        assert "raised torch_npu's task queue failed" in line and "Sin" in line, stdout


FAIL_THEN_DROP = """
import sys, time
import torch_npu_ipc, torch
x = torch.ones(1024, device="npu:0")
own = torch_npu_ipc.import_tensor(torch_npu_ipc.export_tensor(x))  # received from this process itself
_ = own + 1
torch.npu.synchronize()
torch.sin(x)  # aclsim has no Sin: it fails in torch_npu's queue thread, after this call returned
time.sleep(0.3)  # the queue has failed
if sys.argv[1] == "drop":
    del own  # the releaser drains the queue
    # It frees the slot after that drain took the report: wait for that, not a fixed time (a loaded
    # machine can take longer to run the releaser thread, and the add below would then get the report).
    deadline = time.monotonic() + 60
    while torch_npu_ipc.sharing_stats()["live_slots"]:
        assert time.monotonic() < deadline, "the releaser never released the received tensor"
        time.sleep(0.01)
reports = 0
for step in ("add", "read", "item", "bool"):
    try:
        if step == "add":
            y = x + 1
            torch.npu.synchronize()
        elif step == "read":
            print(step, "value", y.cpu()[0].item(), flush=True)
        elif step == "item":
            print(step, "value", y[0].item(), flush=True)
        else:
            print(step, "value", bool(y[0] > 0), flush=True)
    except RuntimeError as e:
        reports += 1
        print(step, "raised", " ".join(str(e).split())[:1000], flush=True)
        if step == "add":
            break  # torch_npu's own report: nothing to read
print("reports", reports, flush=True)
"""


@pytest.mark.parametrize("mode", ["1", "2"])
@pytest.mark.parametrize("drop", ["keep", "drop"])
def test_failed_queue_report_reaches_the_user(mode: str, drop: str) -> None:
    """An operator fails in torch_npu's queue; then the program drops a received tensor (or not) and reads.

    Without the drop, torch_npu's own report reaches the next call, as without the plugin. With it, the
    releaser took the report: one line on stderr, and every read (``.cpu()``, ``.item()``, ``bool()``) raises
    it, naming the failed operator, instead of returning the value of an add torch_npu dropped.
    """
    env = dict(os.environ, TASK_QUEUE_ENABLE=mode)
    r = subprocess.run(
        [sys.executable, "-c", FAIL_THEN_DROP, drop], env=env, check=False, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "value" not in r.stdout, f"a read returned a value after the queue failed:\n{r.stdout}"
    kept = _kept(r.stderr)
    if drop == "keep":
        assert "add raised The Inner error is reported as above" in r.stdout, r.stdout
        assert kept == [], r.stderr[-3000:]
    else:
        assert len(kept) == 1 and "releasing received tensors" in kept[0] and "Sin" in kept[0], r.stderr[-3000:]
        _assert_reads_raise(r.stdout, ("read", "item", "bool"))


HOLD_FAILED_AT_EXIT = """
import time
import torch_npu_ipc, torch
import torch.multiprocessing as mp

def consumer(inbox, outbox):
    x = inbox.get(timeout=60)  # held until the producer's exit ends this daemon process
    _ = x + 1
    torch.npu.synchronize()  # the queue runs
    torch.sin(x)  # fails in torch_npu's queue thread, after this call returned
    time.sleep(0.3)
    outbox.put("failed")
    time.sleep(60)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=consumer, args=(inbox, outbox), daemon=True)
    p.start()
    inbox.put(torch.ones(1024, device="npu:0"))
    assert outbox.get(timeout=60) == "failed"
    print("producer: exiting", flush=True)
"""


@pytest.mark.parametrize("mode", ["1", "2"])
def test_exit_fence_keeps_a_failed_queue_report(mode: str, tmp_path: Path) -> None:
    """A receiver whose queue failed holds a tensor; the producer exits and asks it for a fence.

    The receiver's fencer thread synchronizes the device, which takes torch_npu's report: it prints it
    (the receiver's own reads would raise it, as in the test above), and still answers the fence.
    """
    script = tmp_path / "hold_failed_at_exit.py"  # a file: spawned children import their target from it
    script.write_text(HOLD_FAILED_AT_EXIT)
    env = dict(os.environ, TASK_QUEUE_ENABLE=mode, TORCH_NPU_IPC_EXIT_HELD_GRACE_MS="30000")
    start = time.monotonic()
    r = subprocess.run([sys.executable, str(script)], env=env, check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "producer: exiting" in r.stdout, r.stdout
    kept = _kept(r.stderr)
    assert len(kept) == 1 and "answering an exiting producer's fence" in kept[0] and "Sin" in kept[0], r.stderr[-3000:]
    assert time.monotonic() - start < 60, "the producer waited for the held-tensor grace instead of the fence"


FAIL_THEN_PUT = """
import time
import torch_npu_ipc, torch
import torch.multiprocessing as mp

if __name__ == "__main__":
    q = mp.get_context("spawn").Queue()
    x = torch.ones(1024, device="npu:0")
    _ = x + 1
    torch.npu.synchronize()  # the queue runs
    torch.sin(x)  # fails in torch_npu's queue thread, after this call returned
    time.sleep(0.3)
    q.put(x)  # the queue's feeder thread pickles x, and sharing it drains the failed queue
    time.sleep(1.0)
    for step, read in (("read", lambda: x.cpu()[0].item()), ("item", lambda: x[0].item())):
        try:
            print(step, "value", read(), flush=True)
        except RuntimeError as e:
            print(step, "raised", " ".join(str(e).split())[:1000], flush=True)
"""


def test_a_queue_feeder_thread_keeps_a_failed_queue_report() -> None:
    """``q.put(x)`` after a failure in torch_npu's queue: the feeder thread's pickling takes the report.

    Python prints the feeder's exception and drops the item; the main thread's reads raise the report.
    """
    env = dict(os.environ, TASK_QUEUE_ENABLE="1", TORCH_NPU_IPC_EXIT_GRACE_MS="0")
    r = subprocess.run(
        [sys.executable, "-c", FAIL_THEN_PUT], env=env, check=False, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    kept = _kept(r.stderr)
    assert len(kept) == 1 and "while sharing a tensor" in kept[0] and "Sin" in kept[0], r.stderr[-3000:]
    _assert_reads_raise(r.stdout, ("read", "item"))


FAIL_THEN_GET = """
import threading, time
import torch_npu_ipc, torch
import torch.multiprocessing as mp

def consumer(inbox, outbox):
    x = inbox.get(timeout=60)
    y = x + 1
    torch.npu.synchronize()  # the queue runs
    torch.sin(x)  # fails in torch_npu's queue thread, after this call returned
    time.sleep(0.3)
    got = []
    def unwatched():  # as a DataLoader's pin-memory thread: its exception reaches no one
        try:
            got.append(inbox.get(timeout=60))  # unpickling rebuilds the tensor: its wait enqueues on the failed queue
        except RuntimeError as e:
            got.append(e)
    t = threading.Thread(target=unwatched)
    t.start()
    t.join()
    print("thread got", type(got[0]).__name__, flush=True)
    for step, read in (("read", lambda: y.cpu()[0].item()), ("item", lambda: y[0].item())):
        try:
            print(step, "value", read(), flush=True)
        except RuntimeError as e:
            print(step, "raised", " ".join(str(e).split())[:1000], flush=True)
    outbox.put("done")

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=consumer, args=(inbox, outbox))
    p.start()
    inbox.put(torch.ones(1024, device="npu:0"))
    inbox.put(torch.full((1024,), 2.0, device="npu:0"))
    assert outbox.get(timeout=60) == "done"
    p.join(60)
    print("consumer exit", p.exitcode, flush=True)
"""


def test_a_rebuilding_thread_keeps_a_failed_queue_report(tmp_path: Path) -> None:
    """A receiver's queue failed; a thread of its own (as a DataLoader's pin-memory thread) unpickles a tensor.

    The rebuild's wait on the producer's event takes torch_npu's report: the thread's exception reaches no
    one, so the plugin keeps the report, and the receiver's main thread's reads raise it.
    """
    script = tmp_path / "fail_then_get.py"  # a file: spawned children import their target from it
    script.write_text(FAIL_THEN_GET)
    env = dict(os.environ, TASK_QUEUE_ENABLE="1", TORCH_NPU_IPC_EXIT_GRACE_MS="0")
    r = subprocess.run([sys.executable, str(script)], env=env, check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "thread got RuntimeError" in r.stdout and "consumer exit 0" in r.stdout, r.stdout
    kept = _kept(r.stderr)
    assert len(kept) == 1 and "while rebuilding a received tensor" in kept[0] and "Sin" in kept[0], r.stderr[-3000:]
    _assert_reads_raise(r.stdout, ("read", "item"))
