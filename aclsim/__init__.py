"""aclsim: a CPU simulator of the CANN runtime, for running torch_npu without an NPU.

aclsim provides shared libraries with CANN's names and C ABI (``libascendcl.so``,
``libopapi.so``, ``libhccl.so``, ...) implemented on the CPU: devices, memory,
in-order asynchronous streams, events, IPC memory and IPC events shared by real
processes. The real torch_npu loads them as if CANN were installed.

This module is torch-free: it must be usable *before* torch is imported.

Typical use::

    import aclsim
    aclsim.activate(devices=2)   # before ``import torch``
    import torch, torch_npu

or from the shell: ``aclsim --devices 4 -- python train.py``.
"""

from __future__ import annotations

from aclsim._counters import counters, reset_counters
from aclsim._env import (
    DEFAULT_DEVICES,
    DEFAULT_SOC,
    activate,
    cann_installed,
    is_active,
    lib_dir,
    simulator_env,
)
from aclsim._streams import sleep

__all__ = [
    "DEFAULT_DEVICES",
    "DEFAULT_SOC",
    "activate",
    "cann_installed",
    "counters",
    "is_active",
    "lib_dir",
    "reset_counters",
    "simulator_env",
    "sleep",
]
