"""The ``aclsim`` command line: ``aclsim [--devices N] [--soc S] -- CMD`` and ``python -m aclsim``.

The torch runs double as the "plain run" check: a plain torch_npu program on
aclsim prints no warning about ASCEND_HOME_PATH or missing HCCL functions.
(torch_npu 2.13 prints "... require processing for 32 padding size" on real
CANN 8.5 hardware too; that one is allowed.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from simacl import requires_aclsim

import aclsim

pytestmark = [requires_aclsim, pytest.mark.mode_independent]

ALLOWED_WARNINGS = ("require processing for 32 padding size",)

TORCH_PROGRAM = """
import torch, torch_npu
print("COUNT", torch.npu.device_count())
x = torch.ones(4, device="npu:2")
print("VALUES", (x + 1).cpu().tolist())
s = torch.npu.Stream(device="npu:2")
e = torch.npu.Event()
e.record(s)
e.synchronize()
print("MOVED", x.to("npu:0").cpu().tolist())
print("SOC", torch.npu.get_device_name(2))
"""

RAW_PROGRAM = """
import ctypes
lib = ctypes.CDLL("libascendcl.so")
lib.aclrtGetSocName.restype = ctypes.c_char_p
n = ctypes.c_uint32()
assert lib.aclrtGetDeviceCount(ctypes.byref(n)) == 0
print("COUNT", n.value, "SOC", lib.aclrtGetSocName().decode())
"""


def clean_env() -> dict[str, str]:
    """The test environment without anything aclsim.activate() set: the CLI must set it up itself."""
    env = dict(os.environ)
    for key in ("ACLSIM_ACTIVE", "ACLSIM_DEVICES", "ACLSIM_SOC", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH"):
        env.pop(key, None)
    libs = str(aclsim.lib_dir())
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != libs
    )
    return env


def spurious_warnings(text: str) -> list[str]:
    """Lines that warn about something, except the warnings real hardware prints too."""
    bad = []
    for line in text.splitlines():
        low = line.lower()
        if any(a in line for a in ALLOWED_WARNINGS):
            continue
        if "warn" in low or "ascend_home_path" in low or "hccl" in low:
            bad.append(line)
    return bad


def check_torch_run(proc: subprocess.CompletedProcess[str]) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "COUNT 3" in proc.stdout, out
    assert "VALUES [2.0, 2.0, 2.0, 2.0]" in proc.stdout
    assert "MOVED [1.0, 1.0, 1.0, 1.0]" in proc.stdout
    assert "SOC Ascend910B1" in proc.stdout
    assert not spurious_warnings(out), spurious_warnings(out)


def test_console_script_and_module_run_torch_with_3_devices() -> None:
    """`aclsim --devices 3 -- python -c ...` and `python -m aclsim --devices 3 -- ...` both see 3 devices."""
    exe = shutil.which("aclsim", path=os.path.dirname(sys.executable))
    assert exe is not None, "the aclsim console script is not installed next to the interpreter"
    cmds = [
        [exe, "--devices", "3", "--", sys.executable, "-c", TORCH_PROGRAM],
        [sys.executable, "-m", "aclsim", "--devices", "3", "--", sys.executable, "-c", TORCH_PROGRAM],
    ]
    # Both at once: each pays for importing torch.
    procs = [
        subprocess.Popen(c, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds
    ]
    results = []
    for p, c in zip(procs, cmds, strict=True):
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"timed out: {c}") from None
        results.append(subprocess.CompletedProcess(c, p.returncode, out, err))
    for r in results:
        check_torch_run(r)


def sim(*args: str, timeout: float = 60, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m aclsim ARGS...`` from an environment where aclsim is not active."""
    return subprocess.run(
        [sys.executable, "-m", "aclsim", *args],
        check=False,
        env={**clean_env(), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_soc_option_and_env() -> None:
    """--soc sets the reported SoC; the default is Ascend910B1 and the default device count 2."""
    p = sim("--soc", "Ascend910B2", "--devices", "8", "--", sys.executable, "-c", RAW_PROGRAM)
    assert p.returncode == 0, p.stderr
    assert "COUNT 8 SOC Ascend910B2" in p.stdout
    p = sim("--", sys.executable, "-c", RAW_PROGRAM)
    assert p.returncode == 0, p.stderr
    assert f"COUNT {aclsim.DEFAULT_DEVICES} SOC Ascend910B1" in p.stdout


def test_print_env_and_bad_arguments() -> None:
    """--print-env shows the variables; out-of-range --devices and a missing command are usage errors."""
    p = sim("--devices", "5", "--print-env")
    assert p.returncode == 0, p.stderr
    assert "export ACLSIM_DEVICES=5" in p.stdout
    assert f"export LD_LIBRARY_PATH={aclsim.lib_dir()}" in p.stdout
    for args in (["--devices", "0", "--", "true"], ["--devices", "9", "--", "true"], []):
        p = sim(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
    assert sim("--", "no-such-command-aclsim").returncode == 127


def test_children_inherit_the_simulator() -> None:
    """A grandchild of `aclsim -- sh -c ...` still runs on the simulator with the chosen count."""
    p = sim("--devices", "5", "--", "sh", "-c", f"\"{sys.executable}\" -c '{RAW_PROGRAM}'")
    assert p.returncode == 0, p.stderr
    assert "COUNT 5 SOC Ascend910B1" in p.stdout


MEMORY_PROGRAM = """
import ctypes
lib = ctypes.CDLL("libascendcl.so")
lib.aclrtMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_int]
lib.aclrtGetMemInfo.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
n = ctypes.c_uint32()
lib.aclrtGetDeviceCount(ctypes.byref(n))
assert lib.aclrtSetDevice(n.value - 1) == 0
free, total = ctypes.c_size_t(), ctypes.c_size_t()
assert lib.aclrtGetMemInfo(1, ctypes.byref(free), ctypes.byref(total)) == 0
p = ctypes.c_void_p()
small = lib.aclrtMalloc(ctypes.byref(p), 32 << 20, 0)
big = lib.aclrtMalloc(ctypes.byref(p), 48 << 20, 0)
print("COUNT", n.value, "TOTAL_MB", total.value >> 20, "SMALL", small, "BIG", big)
"""


def test_memory_size_and_visible_devices() -> None:
    """ACLSIM_DEVICE_MEMORY_MB bounds allocations; ASCEND_RT_VISIBLE_DEVICES trims the device list."""
    p = sim(
        "--devices",
        "4",
        "--",
        sys.executable,
        "-c",
        MEMORY_PROGRAM,
        extra_env={"ACLSIM_DEVICE_MEMORY_MB": "64", "ASCEND_RT_VISIBLE_DEVICES": "1,3"},
    )
    assert p.returncode == 0, p.stderr
    words = p.stdout.split()
    got = dict(zip(words[::2], words[1::2], strict=True))
    assert got["COUNT"] == "2"
    assert got["TOTAL_MB"] == "64"
    assert got["SMALL"] == "0"
    assert got["BIG"] != "0", "an allocation past the simulated memory succeeded"
