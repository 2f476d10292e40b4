"""Importing torch/torch_npu on aclsim: availability, device count, SoC name, no spurious warnings."""

from __future__ import annotations

import ctypes
import os

import pytest
import torch
import torch_npu
from simacl import requires_aclsim

import aclsim

pytestmark = requires_aclsim

# The count conftest activated aclsim with (ACLSIM_DEVICES, default 4).
TEST_DEVICES = int(os.environ.get("ACLSIM_DEVICES", "0"))


def test_available_with_conftest_device_count() -> None:
    """conftest activated aclsim with ACLSIM_DEVICES (default 4) devices before torch was imported."""
    assert aclsim.is_active()
    assert torch.npu.is_available()
    assert torch.npu.device_count() == TEST_DEVICES
    assert torch_npu.npu.device_count() == TEST_DEVICES


def test_soc_name() -> None:
    """The simulated SoC is a real Atlas A2 name: torch_npu and the raw C call agree."""
    assert torch_npu.npu.get_device_name(0) == "Ascend910B1"
    lib = ctypes.CDLL("libascendcl.so")
    lib.aclrtGetSocName.restype = ctypes.c_char_p
    assert lib.aclrtGetSocName() == b"Ascend910B1"
    assert aclsim.DEFAULT_SOC == "Ascend910B1"


def test_raw_device_count_matches() -> None:
    """aclrtGetDeviceCount (what torch_npu's C++ side asks) agrees with Python's count."""
    lib = ctypes.CDLL("libascendcl.so")
    n = ctypes.c_uint32(0)
    assert lib.aclrtGetDeviceCount(ctypes.byref(n)) == 0
    assert n.value == TEST_DEVICES


def test_environment_points_at_simulator() -> None:
    """Children inherit the simulator through the environment aclsim.activate() set."""
    assert os.environ["ACLSIM_ACTIVE"] == "1"
    assert os.environ["ACLSIM_DEVICES"] == str(torch.npu.device_count())
    assert os.environ["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(aclsim.lib_dir())
    home = os.environ["ASCEND_HOME_PATH"]
    assert os.path.isdir(os.path.join(home, "runtime")) and os.path.isdir(os.path.join(home, "compiler"))
    assert os.path.isdir(os.environ["ASCEND_OPP_PATH"])


def test_activate_refuses_a_different_device_count() -> None:
    """The device count cannot change inside a running process."""
    aclsim.activate(devices=TEST_DEVICES)  # same count: a no-op
    with pytest.raises(RuntimeError, match="already active"):
        aclsim.activate(devices=3 if TEST_DEVICES != 3 else 2)
    with pytest.raises(ValueError):
        aclsim.simulator_env(devices=9)


# What torch_npu 2.6.0's libtorch_npu.so links from CANN's libgraph.so (GE graph construction; its
# static initializers register operator creators). Without them 2.6.0 fails to load
# ("undefined symbol: _ZN2ge8Operator12AttrRegisterEPKcl"); `make compat TORCH_NPU=2.6.0` runs it.
GE_SYMBOLS = (
    "_ZN2ge12AscendStringC1EPKc",
    "_ZN2ge23OperatorCreatorRegisterC1EPKcRKSt8functionIFNS_8OperatorERKNS_12AscendStringEEE",
    "_ZN2ge8Operator12AttrRegisterEPKcb",
    "_ZN2ge8Operator12AttrRegisterEPKcl",
    "_ZN2ge8Operator13InputRegisterEPKc",
    "_ZN2ge8Operator14OutputRegisterEPKc",
    "_ZN2ge8Operator20DynamicInputRegisterEPKcjb",
    "_ZN2ge8Operator20RequiredAttrRegisterEPKc",
    "_ZN2ge8Operator27DynamicInputRegisterByIndexEPKcjm",
    "_ZN2ge8OperatorC2EPKcS2_",
    "_ZN2ge8OperatorC2ERKNS_12AscendStringES3_",
)


def test_libgraph_exports_what_older_torch_npu_links() -> None:
    """aclsim's libgraph.so defines the GE symbols torch_npu 2.6.0 links directly."""
    lib = ctypes.CDLL(str(aclsim.lib_dir() / "libgraph.so"))
    missing = [name for name in GE_SYMBOLS if not hasattr(lib, name)]
    assert not missing, missing
