"""The simulator's tests check aclsim under torch_npu alone.

They never import torch_npu_ipc, but in a whole-suite run the plugin's test
modules do at collection, and its import installs the cross-device copy
hook for the whole pytest process: the copies these tests make would then
take the plugin's path instead of torch_npu's own. Each test here runs with
the hook removed (and put back after it) whenever the plugin is loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _torch_npus_own_copies() -> Iterator[None]:
    copies = sys.modules.get("torch_npu_ipc.copies")
    if copies is None or not copies.is_enabled():
        yield
        return
    with copies.disabled():
        yield
