"""Helpers shared by the tests: spawning workers with timeouts and collecting their results."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, TypeVar

import torch.multiprocessing as mp

DEFAULT_TIMEOUT = 60.0

T = TypeVar("T")


def soak() -> bool:
    """True when the long soak versions of stress tests were asked for (--soak)."""
    return os.environ.get("TORCH_NPU_IPC_SOAK") == "1"


def fuzz_settings(examples: int) -> Any:
    """Hypothesis settings for the generated tests: ``examples`` fixed examples (ten times as many with --soak).

    Derandomized, without an example database or deadline, health checks off
    (the examples start devices and streams, which the checks would flag).
    """
    from hypothesis import HealthCheck, settings

    return settings(
        max_examples=examples * 10 if soak() else examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )


def torch_npu_owns_to_device() -> bool:
    """True when torch_npu implements ``Tensor.to(device, dtype)`` itself (``aten::to.device``; 2.7.1 does, 2.13 not).

    Its kernel casts on the source device first and hands a contiguous tensor
    to the copy: the result is contiguous whatever the source's layout.
    ``Tensor.to(device)`` without a dtype still reaches ``aten::_to_copy``.
    """
    import torch

    return torch._C._dispatch_has_kernel_for_dispatch_key("aten::to.device", "PrivateUse1")


def native_event_ipc() -> bool:
    """True when the installed torch_npu has event IPC of its own (2.7.1.post4 and later)."""
    import torch_npu

    return hasattr(torch_npu.npu.Event, "ipc_handle")


def native_external_stream() -> bool:
    """True when the installed torch_npu has a Python ``ExternalStream`` of its own."""
    import torch_npu

    return hasattr(torch_npu.npu, "ExternalStream")


def torch_npu_version() -> str:
    """The installed torch_npu's version, for skip reasons."""
    import torch_npu

    return str(getattr(torch_npu, "__version__", "?"))


def task_queue_on() -> bool:
    """True when torch_npu queues work (``TASK_QUEUE_ENABLE`` 1 or 2, its default, and no launch blocking)."""
    return os.environ.get("TASK_QUEUE_ENABLE", "1") != "0" and os.environ.get("ASCEND_LAUNCH_BLOCKING") != "1"


def run_processes(
    targets: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]], timeout: float = DEFAULT_TIMEOUT
) -> None:
    """Start one spawned process per (target, args), join all, and fail on any error or timeout.

    Each target receives its args; a target reports failure by raising (the
    exit code is then non-zero). Processes still alive at the deadline are
    killed and reported.
    """
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=t, args=a, name=t.__name__, daemon=True) for t, a in targets]
    for p in procs:
        p.start()
    join_all(procs, timeout)


def join_all(procs: Iterable[BaseProcess], timeout: float = DEFAULT_TIMEOUT) -> None:
    """Join ``procs``; kill and fail on a timeout, fail on a non-zero exit code.

    Each process gets ``timeout`` seconds of its own; failures name the process.
    """
    failures = []
    for p in procs:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join(5)
            failures.append(f"{p.name}: timed out after {timeout}s")
        elif p.exitcode != 0:
            failures.append(f"{p.name}: exit code {p.exitcode}")
    assert not failures, "; ".join(failures)


def on_device_thread(set_device: Callable[[int], int], device: int, fn: Callable[[], T], timeout: float = 120.0) -> T:
    """Run ``fn`` on a short-lived thread after ``set_device(device)``; return its result or raise its exception.

    ACL's current device is per thread: this is how another library's code
    runs with its own device current, without changing the device torch_npu
    believes current on the calling thread. ``set_device`` is the raw
    ``aclrtSetDevice`` (it must return 0).
    """
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            rc = set_device(device)
            assert rc == 0, f"aclrtSetDevice({device}) failed with ACL error {rc}"
            out["v"] = fn()
        except BaseException as e:
            out["e"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"an ACL call on npu:{device} did not return in {timeout} s"
    if "e" in out:
        raise out["e"]
    return out["v"]


def run_threads(targets: Sequence[Callable[[], None]]) -> None:
    """Run each target in a thread of its own and join them all; fail with every thread's traceback."""
    failures: list[str] = []

    def guarded(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException:
            failures.append(traceback.format_exc())

    threads = [threading.Thread(target=guarded, args=(fn,)) for fn in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, "\n".join(failures)


def run_script(script: Path, text: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``text`` as the file ``script`` (spawned children import their targets from it) with ``env`` added."""
    script.write_text(text)
    return subprocess.run(
        [sys.executable, str(script)],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
