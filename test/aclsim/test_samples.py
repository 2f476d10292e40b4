"""The CANN IPC event samples, rewritten in C++ against plain ACL headers, run on aclsim.

Builds csrc/aclsim/samples with g++ into a temporary directory and runs the
binaries as real processes: the two-process handshake on one device, and one
producer on device 0 -> N consumers on devices 1..N, including the
device-count precheck that skips on too small a machine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import aclsim

pytestmark = [pytest.mark.samples, pytest.mark.mode_independent]

REPO = Path(__file__).resolve().parents[2]
SAMPLES_DIR = REPO / "csrc" / "aclsim" / "samples"
RUN_TIMEOUT = 120  # each binary bounds its own waits to 30 s per step


def _load_builder():
    spec = importlib.util.spec_from_file_location("aclsim_samples_build", SAMPLES_DIR / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if aclsim.cann_installed():
        pytest.skip("a real CANN is installed; these tests exercise the samples on aclsim")
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler")
    builder = _load_builder()
    try:
        return builder.build(tmp_path_factory.mktemp("samples"))
    except builder.HeadersTooOld as e:  # torch_npu 2.7.1's headers: the samples need CANN 8.x's
        pytest.skip(str(e))


def _run(args: list[str], devices: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = aclsim.simulator_env(devices=devices)
    env["TMPDIR"] = str(cwd)  # the launchers make their work directories here
    proc = subprocess.run(
        [str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    print(proc.stdout, proc.stderr, sep="\n")  # shown by pytest on failure
    return proc


def _lines(proc: subprocess.CompletedProcess[str], prefix: str) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith(prefix)]


def test_handshake_two_processes_one_device(samples: dict[str, Path], tmp_path: Path) -> None:
    proc = _run([samples["ipc_event_handshake"]], devices=2, cwd=tmp_path)
    assert proc.returncode == 0
    assert not _lines(proc, "[FAIL]")
    assert "[PASS] producer: IPC event handshake" in proc.stdout
    assert "[PASS] consumer: IPC event handshake" in proc.stdout
    assert "[PASS] IPC event handshake between two processes on device 0" in proc.stdout
    assert "event recorded and synchronized, status 1 (COMPLETE)" in proc.stdout
    assert "woken by the consumer's record" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # the launcher removed its work directory


def test_handshake_roles_as_separate_invocations(samples: dict[str, Path], tmp_path: Path) -> None:
    """The same binary started twice by hand, exchanging the handle through a directory."""
    binary = samples["ipc_event_handshake"]
    env = aclsim.simulator_env(devices=2)
    procs = {
        role: subprocess.Popen(
            [str(binary), role, "--dir", str(tmp_path), "--device", "1"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for role in ("consumer", "producer")  # consumer first: it must wait for the handle
    }  # fmt: skip
    outputs = {}
    try:
        for role, p in procs.items():
            outputs[role], _ = p.communicate(timeout=RUN_TIMEOUT)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    print(outputs)
    for role, p in procs.items():
        assert p.returncode == 0, outputs.get(role)
        assert f"[PASS] {role}: IPC event handshake" in outputs[role]
    assert "IPC event opened on device 1" in outputs["consumer"]
    assert (tmp_path / "event.handle").stat().st_size == 64
    assert (tmp_path / "consumer.done").is_file()


def test_multi_device_one_producer_three_consumers(samples: dict[str, Path], tmp_path: Path) -> None:
    proc = _run([samples["ipc_event_multi_device"], "3"], devices=4, cwd=tmp_path)
    assert proc.returncode == 0
    assert not _lines(proc, "[FAIL]")
    assert not _lines(proc, "[SKIP]")
    assert "[INFO] precheck: 4 devices available, 4 required" in proc.stdout
    for k in (1, 2, 3):
        assert f"[INFO] consumer {k}: IPC event opened on device {k}" in proc.stdout
        assert f"[PASS] consumer {k} (device {k}) finished successfully" in proc.stdout
    assert "[PASS] producer: 3 consumer(s) on devices 1..3 finished successfully" in proc.stdout
    assert "[PASS] IPC event multi-device synchronization: 1 producer -> 3 consumer(s)" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_multi_device_skips_without_enough_devices(samples: dict[str, Path], tmp_path: Path) -> None:
    binary = samples["ipc_event_multi_device"]
    proc = _run([binary, "3"], devices=2, cwd=tmp_path)
    assert proc.returncode == 0
    assert "[SKIP] need at least 4 devices, but only 2 available" in proc.stdout
    assert "[SKIP] IPC event multi-device sample" in proc.stdout
    assert not _lines(proc, "[PASS]")
    assert not _lines(proc, "[FAIL]")
    assert "producer" not in proc.stdout  # nothing was launched
    # The precheck on its own reports the skip with its distinct exit code.
    pre = _run([binary, "precheck", "4"], devices=2, cwd=tmp_path)
    assert pre.returncode == 2
    assert "[SKIP]" in pre.stdout
    assert _run([binary, "precheck", "2"], devices=2, cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("count", ["0", "9", "x"])
def test_multi_device_rejects_bad_consumer_count(samples: dict[str, Path], tmp_path: Path, count: str) -> None:
    proc = _run([samples["ipc_event_multi_device"], count], devices=4, cwd=tmp_path)
    assert proc.returncode == 64
    assert "usage:" in proc.stderr
