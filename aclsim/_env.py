"""Locating the simulator's libraries and activating them for this process and its children."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

DEFAULT_DEVICES = 2
DEFAULT_SOC = "Ascend910B1"
MAX_DEVICES = 8

# Load order matters: every other library links libascendcl.so.
_LIBRARIES = (
    "libascendcl.so",
    "libacl_op_compiler.so",
    "libge_runner.so",
    "libgraph.so",
    "libacl_tdt_channel.so",
    "libruntime.so",
    "libhccl.so",
    "libascend_hal.so",
    "libopapi.so",
)

# Variables simulator_env() sets.
_ENV_KEYS = ("ACLSIM_ACTIVE", "ACLSIM_DEVICES", "ACLSIM_SOC", "LD_LIBRARY_PATH", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")

_handles: list[ctypes.CDLL] = []


def lib_dir() -> Path:
    """Return the directory holding the built simulator libraries.

    Raises:
        RuntimeError: if the libraries were not built (``pip install -e .`` builds them).
    """
    d = Path(__file__).resolve().parent / "lib"
    if not (d / "libascendcl.so").is_file():
        raise RuntimeError(
            f"aclsim libraries are missing from {d}; build them with "
            "`pip install --no-build-isolation -e .` or `python tools/build_aclsim.py`"
        )
    return d


def cann_installed() -> bool:
    """Return True when a real CANN runtime is installed (then aclsim is not needed)."""
    home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
    if home and os.environ.get("ACLSIM_ACTIVE") != "1":
        for sub in ("lib64", "runtime/lib64"):
            if (Path(home) / sub / "libascendcl.so").is_file():
                return True
    return Path("/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so").is_file()


def is_active() -> bool:
    """Return True when this process runs on the simulator."""
    return (os.environ.get("ACLSIM_ACTIVE") == "1" and bool(_handles)) or _preloaded_by_env()


def _preloaded_by_env() -> bool:
    if os.environ.get("ACLSIM_ACTIVE") != "1":
        return False
    try:
        ctypes.CDLL("libascendcl.so", mode=os.RTLD_NOLOAD).aclsimCounterCount  # noqa: B018
    except (OSError, AttributeError):
        return False
    return True


def devices_from_env() -> int:
    """``ACLSIM_DEVICES`` as an int (unset or empty: the default); ValueError naming it otherwise."""
    value = os.environ.get("ACLSIM_DEVICES", "").strip()
    if not value:
        return DEFAULT_DEVICES
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_DEVICES:
        raise ValueError(f"ACLSIM_DEVICES must be an integer from 1 to {MAX_DEVICES}, got {value!r}")
    return int(value)


def _check_devices(devices: int | None) -> int:
    if devices is None:
        devices = devices_from_env()
    if isinstance(devices, bool) or not isinstance(devices, int):
        raise TypeError(f"devices must be an int, got {type(devices).__name__}")
    if not 1 <= devices <= MAX_DEVICES:
        raise ValueError(f"devices must be between 1 and {MAX_DEVICES}, got {devices}")
    return devices


def simulator_env(
    devices: int | None = None, soc: str | None = None, base: dict[str, str] | None = None
) -> dict[str, str]:
    """Return a copy of ``base`` (default ``os.environ``) set up to run a program on aclsim."""
    env = dict(os.environ if base is None else base)
    libs = str(lib_dir())
    env["ACLSIM_ACTIVE"] = "1"
    env["ACLSIM_DEVICES"] = str(_check_devices(devices))
    env["ACLSIM_SOC"] = soc or env.get("ACLSIM_SOC") or DEFAULT_SOC
    paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != libs]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([libs, *paths])
    # torch_npu checks CANN's install tree: point it at the simulator's
    # placeholder tree (runtime/, compiler/, opp/), never at a real CANN.
    home = Path(__file__).resolve().parent / "cann_home"
    env.pop("ASCEND_TOOLKIT_HOME", None)
    env["ASCEND_HOME_PATH"] = str(home)
    env["ASCEND_OPP_PATH"] = str(home / "opp")
    return env


def activate(devices: int | None = None, soc: str | None = None) -> None:
    """Run this process, and the processes it starts, on the simulator.

    Must be called before torch is imported (torch autoloads torch_npu, which
    links CANN's libraries at import). The libraries are loaded into this
    process by SONAME, so torch_npu binds to them; the environment is updated
    so children (subprocess, torch.multiprocessing spawn) inherit the simulator.

    Args:
        devices: number of simulated devices, 1..8 (default: ``$ACLSIM_DEVICES`` or 2).
        soc: SoC name reported to torch_npu (default ``Ascend910B1``).

    Raises:
        RuntimeError: if torch_npu is already imported, or the libraries are not built.
    """
    if _handles:
        want = str(_check_devices(devices))
        if want != os.environ.get("ACLSIM_DEVICES"):
            raise RuntimeError(
                f"aclsim is already active with {os.environ.get('ACLSIM_DEVICES')} devices; "
                "the device count cannot change inside a process"
            )
        return
    if "torch_npu" in sys.modules:
        raise RuntimeError(
            "aclsim.activate() must run before torch/torch_npu is imported; "
            "call it first, or start the program with `aclsim -- python ...`"
        )
    env = simulator_env(devices, soc)
    for key in _ENV_KEYS:
        os.environ[key] = env[key]
    os.environ.pop("ASCEND_TOOLKIT_HOME", None)
    d = lib_dir()
    for name in _LIBRARIES:
        if (d / name).is_file():
            _handles.append(ctypes.CDLL(str(d / name), mode=os.RTLD_GLOBAL))


def runtime() -> ctypes.CDLL:
    """Return the loaded simulator runtime (libascendcl.so)."""
    if _handles:
        return _handles[0]
    if not _preloaded_by_env():
        raise RuntimeError(
            "aclsim is not active in this process: call aclsim.activate() before importing torch, "
            "or run the program under `aclsim -- ...`"
        )
    return ctypes.CDLL("libascendcl.so", mode=os.RTLD_NOLOAD)
