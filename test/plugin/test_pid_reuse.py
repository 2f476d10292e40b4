"""A dead receiver's reference slot is reclaimed even when its pid was reused at once.

``pidreuse_job.py`` runs as pid 1 of a new pid namespace, where it can hand
the dead receiver's pid to another process on purpose (the kernel does the
same by chance on a busy host). A liveness check by pid alone would keep the
producer's memory forever; the plugin compares the claimer's start time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import aclsim

pytestmark = [
    pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)"),
    pytest.mark.mode_independent,  # slot bookkeeping: the queue mode changes nothing here
]

JOB = Path(__file__).with_name("pidreuse_job.py")


def _unshare() -> list[str]:
    """The command prefix that runs a program as pid 1 of a new pid namespace."""
    exe = shutil.which("unshare")
    if exe is None:
        pytest.skip("util-linux's unshare is not installed: cannot make pid namespaces")
    cmd = [exe, "--pid", "--fork", "--mount-proc"]
    probe = subprocess.run(
        [*cmd, "sh", "-c", "echo 100 > /proc/sys/kernel/ns_last_pid"], check=False, capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"this machine refuses new pid namespaces or setting ns_last_pid: {probe.stderr.strip()}")
    return cmd


def test_dead_receivers_reused_pid_does_not_keep_its_slot() -> None:
    out = subprocess.run(
        [*_unshare(), sys.executable, str(JOB)], check=False, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, f"job failed:\n{out.stdout}\n{out.stderr}"
    assert "was reused" in out.stdout, out.stdout
