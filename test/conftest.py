"""Test session set-up: run on aclsim unless a real CANN runtime is installed.

aclsim must be activated before torch is imported, so this file imports
only the torch-free ``aclsim`` helper at the top. Spawned worker processes
inherit the simulator through the environment.
"""

from __future__ import annotations

import os

import pytest

import aclsim

# Enough devices for the 1 producer -> N consumers scenarios.
TEST_DEVICES = int(os.environ.get("ACLSIM_DEVICES", "4"))

if not aclsim.cann_installed():
    aclsim.activate(devices=TEST_DEVICES)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the long soak versions of stress tests")


def pytest_configure(config: pytest.Config) -> None:
    # Child processes read this to size their loops.
    os.environ["TORCH_NPU_IPC_SOAK"] = "1" if config.getoption("--soak") else "0"
