"""Two sharing jobs in two pid namespaces at once, on one host: IPC names must not collide across containers.

Each job (``pidns_job.py``) is pid 1 of its own pid namespace, and its
consumer gets the same pid in both. They share /dev/shm and the network
namespace, so a name built from the pid alone (aclsim's broker sockets, the
plugin's reference tables) would be the same in both jobs, as in containers
started side by side. The test checks that both jobs read every value right,
that neither warns, and that the names they saw while both were up are
distinct and carry the pid namespace.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import aclsim

pytestmark = [
    pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)"),
    pytest.mark.mode_independent,
]

JOB = Path(__file__).with_name("pidns_job.py")
ROUNDS = 20
TIMEOUT = 240


def _unshare() -> list[str]:
    """The command prefix that runs a program as pid 1 of a new pid namespace."""
    exe = shutil.which("unshare")
    if exe is None:
        pytest.skip("util-linux's unshare is not installed: cannot make pid namespaces")
    cmd = [exe, "--pid", "--fork", "--mount-proc"]
    probe = subprocess.run([*cmd, "true"], check=False, capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"this machine refuses new pid namespaces: {probe.stderr.strip()}")
    return cmd


def test_two_jobs_with_the_same_pids_do_not_collide(tmp_path: Path) -> None:
    cmd = _unshare()
    jobs = {
        tag: subprocess.Popen(
            [*cmd, sys.executable, str(JOB), tag, str(tmp_path), str(ROUNDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for tag in ("a", "b")
    }
    out = {}
    for tag, p in jobs.items():
        try:
            out[tag], _ = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for q in jobs.values():
                q.kill()
            raise
    for tag, p in jobs.items():
        assert p.returncode == 0, f"job {tag} failed:\n{out[tag]}"
        assert f"{tag}: {ROUNDS + 1} rounds ok as pid 1" in out[tag], out[tag]
        assert "torch_npu_ipc: warning" not in out[tag], out[tag]

    seen = {tag: json.loads((tmp_path / f"{tag}.json").read_text()) for tag in jobs}
    assert seen["a"]["pid"] == seen["b"]["pid"] == 1
    ns = {tag: seen[tag]["pidns"] for tag in jobs}
    assert ns["a"] != ns["b"], ns
    for tag in jobs:
        # Each job saw both producers' brokers and tables (pid 1 twice), told apart by the namespace.
        brokers = set(seen[tag]["brokers"])
        assert {f"@aclsim-broker-{ns['a']}-1", f"@aclsim-broker-{ns['b']}-1"} <= brokers, brokers
        ns_ids = {n.strip("pid:[]") for n in ns.values()}
        tables = {name.split(".")[1] for name in seen[tag]["tables"] if name.split(".")[2] == "1"}
        # A subset: another part of the suite may run a job of its own as pid 1 meanwhile (test_pid_reuse.py).
        assert ns_ids <= tables, (tables, seen[tag]["tables"])
