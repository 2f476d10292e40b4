"""Choosing the runtime under torch_npu: real CANN when installed, else the aclsim simulator.

This runs before torch is imported (torch autoloads torch_npu, which links
CANN's libraries at import time), so it must not import torch itself.
"""

from __future__ import annotations

import ctypes
import os
import sys

import aclsim

ENV_VAR = "TORCH_NPU_IPC_SIMULATOR"


def select_runtime() -> str:
    """Activate aclsim unless a real CANN runtime is installed; return ``"cann"`` or ``"aclsim"``.

    ``TORCH_NPU_IPC_SIMULATOR=1`` forces the simulator, ``=0`` forbids it.
    When torch_npu was imported before this package, the runtime it loaded
    is kept and reported.

    Raises:
        RuntimeError: when the simulator is forced but torch_npu is already
            loaded on another runtime.
    """
    mode = os.environ.get(ENV_VAR, "auto").strip().lower()
    if mode not in ("auto", "0", "1"):
        raise ValueError(f"{ENV_VAR} must be 'auto', '0' or '1', got {mode!r}")
    if "torch_npu" in sys.modules or ("torch" in sys.modules and _torch_loaded_npu()):
        active = aclsim.is_active()
        if mode == "1" and not active:
            raise RuntimeError(
                f"{ENV_VAR}=1 asks for the simulator, but torch_npu was already loaded on CANN; "
                "import torch_npu_ipc before torch, or run under `aclsim -- ...`"
            )
        return "aclsim" if active else "cann"
    if aclsim.is_active():  # aclsim.activate() or `aclsim -- ...` before this import
        if mode == "0":
            raise RuntimeError(
                f"{ENV_VAR}=0 asks for CANN, but aclsim is already active in this process "
                "(aclsim.activate() or `aclsim -- ...`)"
            )
        return "aclsim"
    if mode == "0":
        if not aclsim.cann_installed() and not _loadable("libascendcl.so"):
            # torch_npu would fail to load its libraries with a message that names neither.
            raise RuntimeError(
                f"{ENV_VAR}=0 asks for CANN, but no CANN runtime is installed (libascendcl.so not found: "
                "source CANN's set_env.sh first), or unset it to run on the simulator"
            )
        return "cann"
    if mode == "auto" and aclsim.cann_installed():
        return "cann"
    aclsim.activate()
    return "aclsim"


def _torch_loaded_npu() -> bool:
    return any(name == "torch_npu" or name.startswith("torch_npu.") for name in sys.modules)


def _loadable(library: str) -> bool:
    """Whether the dynamic loader finds ``library`` (CANN outside its usual places, on LD_LIBRARY_PATH)."""
    try:
        ctypes.CDLL(library)
    except OSError:
        return False
    return True
