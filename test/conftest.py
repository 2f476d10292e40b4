"""Test session set-up: run on aclsim unless a real CANN runtime is installed.

aclsim must be activated before torch is imported, so this file imports
only the torch-free ``aclsim`` helper at the top. Spawned worker processes
inherit the simulator through the environment.
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings

import pytest

import aclsim

# torch_npu's release thread (one per task queue: per device, or per stream
# with PER_STREAM_QUEUE=1) polls its ring with select() and a 1 us timeout
# for as long as the process lives. With the kernel's default 50 us timer
# slack, four idle device queues cost two thirds of a core (measured: 3.4
# CPU-s in 5 s of idle, TASK_QUEUE_ENABLE=1), and every spawned worker has
# its own: on CI's 2 cores the tests then wait for CPU, not for work. A 1 ms
# slack makes those polls ~20x rarer (0.28 CPU-s in the same 5 s). It is
# inherited by every thread and process started afterwards, so it is set
# before torch_npu starts a thread. Slack only lets timed sleeps end up to
# 1 ms late; no ordering changes. TORCH_NPU_IPC_TEST_TIMER_SLACK_NS=0 keeps
# the kernel's default.
PR_SET_TIMERSLACK = 29
TIMER_SLACK_NS = int(os.environ.get("TORCH_NPU_IPC_TEST_TIMER_SLACK_NS", "1000000"))


def _set_timer_slack(ns: int) -> None:
    if ns <= 0 or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0) != 0:
        warnings.warn(f"prctl(PR_SET_TIMERSLACK, {ns}) failed: {os.strerror(ctypes.get_errno())}", stacklevel=1)


_set_timer_slack(TIMER_SLACK_NS)

# Enough devices for the 1 producer -> N consumers scenarios.
TEST_DEVICES = int(os.environ.get("ACLSIM_DEVICES", "4"))

if not aclsim.cann_installed():
    aclsim.activate(devices=TEST_DEVICES)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the long soak versions of stress tests")
    parser.addoption(
        "--shard",
        metavar="K/N",
        help="run only part K of N of the selected tests: every N-th, starting at the K-th (tools/run_tests.py "
        "runs the N parts side by side)",
    )


def _shard(spec: str) -> tuple[int, int]:
    """``"K/N"`` as (K, N), checked."""
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard expects K/N with whole numbers, e.g. 1/2; got {spec!r}") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--shard {spec}: K must be between 1 and N")
    return k, n


# (K, N) of --shard, or None; parsed once, in pytest_configure.
SHARD = pytest.StashKey[tuple[int, int] | None]()


@pytest.hookimpl(trylast=True)  # after -m and -k deselected theirs: the parts split what is left
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.stash[SHARD]
    if shard is None:
        return
    k, n = shard
    keep = items[k - 1 :: n]
    kept = {id(item) for item in keep}
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
    items[:] = keep


def pytest_configure(config: pytest.Config) -> None:
    # Child processes read this to size their loops.
    os.environ["TORCH_NPU_IPC_SOAK"] = "1" if config.getoption("--soak") else "0"
    spec = config.getoption("--shard")
    config.stash[SHARD] = None if spec is None else _shard(spec)  # a bad K/N stops the run before collection


def _visible_devices() -> int:
    """The NPUs the tests can use: aclsim's configured count, else what torch_npu sees."""
    if aclsim.is_active():
        return TEST_DEVICES
    import torch_npu_ipc  # noqa: F401  (before torch, as everywhere)

    # isort: split
    import torch

    return torch.npu.device_count()


def pytest_runtest_setup(item: pytest.Item) -> None:
    # ``@pytest.mark.devices(n)``: a machine (or an ACLSIM_DEVICES) with fewer
    # NPUs skips the test instead of failing in a device switch.
    marks = list(item.iter_markers("devices"))
    if marks:
        need = max(int(m.args[0]) for m in marks)
        have = _visible_devices()
        if have < need:
            pytest.skip(f"needs {need} NPUs, this machine has {have} (aclsim: ACLSIM_DEVICES={need} or more)")
