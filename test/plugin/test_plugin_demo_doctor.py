"""The product's entry points run as a user runs them: the demo, doctor, and the aclsim CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import task_queue_on

from torch_npu_ipc import _C
from torch_npu_ipc.streams import per_stream_queue_refusal


def _run(args: list[str], timeout: float = 240.0, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ACLSIM_DEVICES="4", **extra_env)
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def _doctor(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch_npu_ipc", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **env),
        check=False,
    )


def test_demo_succeeds() -> None:
    out = _run(["torch_npu_ipc.demo", "--tensors", "40"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[SUCCESS]" in out.stdout
    assert "read back 42: ok" in out.stdout
    assert "3 consumers on npu:1..3" in out.stdout and "ok" in out.stdout
    assert "every tensor arrived with its final value: ok" in out.stdout


def test_demo_skips_fanout_with_too_few_devices() -> None:
    out = _run(["torch_npu_ipc.demo", "--flows", "b", "--consumers", "7"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "[SKIP] 1 producer -> 7 consumers needs 8 devices, found 4 (run with --consumers 3, or set ACLSIM_DEVICES=8"
        in out.stdout
    )
    assert "[SUCCESS]" in out.stdout and "(a)" not in out.stdout and "(c)" not in out.stdout, out.stdout
    beyond = _run(["torch_npu_ipc.demo", "--flows", "b", "--consumers", "8"])  # aclsim simulates 8 at most
    assert "needs 9 devices, found 4 (run with --consumers 3)" in beyond.stdout, beyond.stdout + beyond.stderr


@pytest.mark.mode_independent
@pytest.mark.parametrize("flows", ["", "d", "a,,c", "a;b"])
def test_demo_refuses_unknown_flows(flows: str, capsys: pytest.CaptureFixture[str]) -> None:
    from torch_npu_ipc.demo import main

    with pytest.raises(SystemExit) as stop:
        main(["--flows", flows])
    assert stop.value.code == 2
    assert "--flows takes a comma-separated choice of a, b and c" in capsys.readouterr().err


def test_demo_on_a_chip_without_ipc_events() -> None:
    """The flows that need interprocess events say why they skip; the handoff synchronizes each send."""
    out = _run(["torch_npu_ipc.demo", "--tensors", "10"], ACLSIM_IPC_EVENTS="0")
    assert out.returncode == 0, out.stdout + out.stderr
    reason = "needs interprocess events: this NPU does not support interprocess events"
    assert f"(a) [SKIP] the handshake {reason}" in out.stdout, out.stdout
    assert f"(b) [SKIP] 1 producer -> 3 consumers {reason}" in out.stdout, out.stdout
    assert "producer stream synchronizes: 10 (synchronizes avoided: 0)" in out.stdout, out.stdout
    assert "every tensor arrived with its final value: ok" in out.stdout and "[SUCCESS]" in out.stdout
    assert "npu:0 cannot share tensors with events" in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("command", [["torch_npu_ipc", "doctor"], ["torch_npu_ipc"]])
def test_doctor_reports_runtime_and_paths(command: list[str]) -> None:
    out = _run(command, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "runtime        aclsim" in out.stdout
    assert "devices        4" in out.stdout
    assert "IPC events     supported" in out.stdout
    assert "interprocess Event                         plugin (ACL IPC events" in out.stdout
    assert "tensor sharing                             plugin (IPC memory + IPC events)" in out.stdout
    line = next(x for x in out.stdout.splitlines() if "cross-device copies" in x)
    assert "plugin, two-way event barrier" in line and "(hook on" in line, line
    assert ("queued behind torch_npu's tasks" if task_queue_on() else "issued from the calling thread") in line, line
    # The paths section's line (the native-features section has one too).
    line = [x for x in out.stdout.splitlines() if x.strip().startswith("ExternalStream ")][-1]
    if not _C._stream_from_external_available():
        assert "plugin, proxy stream (this torch_npu lacks" in line, line
    elif per_stream_queue_refusal():  # torch_npu's per-stream queue refuses foreign streams
        assert "plugin, proxy stream (torch_npu's per-stream task queue (PER_STREAM_QUEUE=" in line, line
    else:  # torch_npu 2.13 and later
        assert "plugin over torch_npu's getStreamFromExternal" in line, line


@pytest.mark.parametrize(("value", "expect"), [("0", "torch_npu's own (hook off"), ("sync", "stream synchronize")])
def test_doctor_reports_the_copy_hook_setting(value: str, expect: str) -> None:
    out = _doctor(ACLSIM_DEVICES="2", TORCH_NPU_IPC_COPIES=value)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if "cross-device copies" in x)
    assert expect in line, line


def _import_in_fresh_process(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``import torch_npu_ipc`` in a new interpreter with environment ``env``."""
    return subprocess.run(
        [sys.executable, "-c", "import torch_npu_ipc"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_doctor_without_a_visible_npu() -> None:
    """No NPU visible (ASCEND_RT_VISIBLE_DEVICES names none): doctor says so instead of failing."""
    out = _doctor(ACLSIM_DEVICES="2", ASCEND_RT_VISIBLE_DEVICES="9")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "devices        0" in out.stdout
    line = next(x for x in out.stdout.splitlines() if "cross-device copies" in x)
    assert line.split()[-2:] == ["no", "NPU"], line


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TORCH_NPU_IPC_MAX_INFLIGHT", "abc"),
        ("TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S", "-1"),
        ("TORCH_NPU_IPC_EXPORT_GRACE_MS", "5s"),
        ("ACLSIM_DEVICES", "four"),
        ("ACLSIM_DEVICES", "0"),
        ("ACLSIM_DEVICES", "9"),
        # The core parses ASCII digits only: these passed the import check and then read as the default.
        ("TORCH_NPU_IPC_MAX_INFLIGHT", "5 "),
        ("TORCH_NPU_IPC_MAX_INFLIGHT", "\u0663"),
        # Past about 31 years: converted to nanoseconds after now, they overflowed into "no time at all".
        ("TORCH_NPU_IPC_EXPORT_GRACE_MS", "10000000000000"),
        ("TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S", "10000000000"),
        ("TORCH_NPU_IPC_KEPT_IMPORTS", "4097"),
    ],
)
def test_bad_settings_name_the_variable(name: str, value: str) -> None:
    """A setting read by the C++ core (or aclsim) that is not an integer in its range raises at import, naming it."""
    env = dict(os.environ, **{name: value})
    env.pop("ACLSIM_ACTIVE", None)  # a fresh process: aclsim activates from its own settings
    out = _import_in_fresh_process(env)
    assert out.returncode != 0
    assert "ValueError" in out.stderr and name in out.stderr and repr(value) in out.stderr, out.stderr[-2000:]


def test_runtime_is_aclsim_when_activated_before_import_even_with_cann_installed() -> None:
    """aclsim.activate() before the import wins over an installed CANN (faked here): RUNTIME says aclsim."""
    code = (
        "import aclsim; aclsim.activate(); aclsim.cann_installed = lambda: True\n"
        "import torch_npu_ipc; print('RUNTIME', torch_npu_ipc.RUNTIME)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RUNTIME aclsim" in out.stdout


def test_cli_help_and_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    from torch_npu_ipc.__main__ import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m torch_npu_ipc") and "doctor" in out and "bench" in out
    assert main(["bogus"]) == 2
    assert "unknown command 'bogus'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # used to ignore its arguments and print the report
        main(["doctor", "--help"])
    assert exc.value.code == 0 and "usage: python -m torch_npu_ipc doctor" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["doctor", "--bogus"])
    assert exc.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_doctor_names_the_setting_that_turned_the_task_queue_off() -> None:
    """ASCEND_LAUNCH_BLOCKING=1 turns the queue off; the autograd line named TASK_QUEUE_ENABLE=0 instead."""
    out = _doctor(ASCEND_LAUNCH_BLOCKING="1")
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if "autograd cross-device events" in x)
    assert "task queue off (ASCEND_LAUNCH_BLOCKING=1)" in line, line


def test_forbidding_the_simulator_without_cann_names_the_fix() -> None:
    """TORCH_NPU_IPC_SIMULATOR=0 without CANN: our message, not torch's "Failed to load the backend extension"."""
    import aclsim

    if aclsim.cann_installed():
        pytest.skip("a CANN runtime is installed here")  # pragma: no cover - machines with CANN
    # This process runs on aclsim: take its settings out, as in a fresh shell.
    drop = ("ACLSIM_ACTIVE", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH", "LD_PRELOAD")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    sim_libs = str(aclsim.lib_dir())
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p != sim_libs
    )
    env["TORCH_NPU_IPC_SIMULATOR"] = "0"
    out = _import_in_fresh_process(env)
    assert out.returncode != 0
    assert "TORCH_NPU_IPC_SIMULATOR=0 asks for CANN, but no CANN runtime is installed" in out.stderr, out.stderr[-2000:]


@pytest.mark.mode_independent
@pytest.mark.parametrize(
    "argv",
    [
        ["--consumers", "0"],
        ["--tensors", "0"],
        ["--work-ms", "0"],
        ["--work-ms", "-1"],
        ["--work-ms", "nan"],  # passed the old "<= 0" check and failed inside flow (c)
        ["--work-ms", "inf"],
    ],
)
def test_demo_refuses_counts_it_cannot_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before any flow runs; these used to run the demo and fail inside a flow."""
    from torch_npu_ipc.demo import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert "--consumers and --tensors must be >= 1, --work-ms a number of milliseconds > 0" in captured.err
    assert "[SUCCESS]" not in captured.out and "[FAILURE]" not in captured.out


def test_doctor_names_known_torch_npu_bugs() -> None:
    """torch_npu 2.6.0's device bug (seen by make compat in mode 0) is named with its fix, only where it applies."""
    from torch_npu_ipc.doctor import known_torch_npu_bugs

    for version in ("2.6.0", "2.6.0.post1"):
        (bug,) = known_torch_npu_bugs(version, task_queue=False)
        assert "107003" in bug and "2.6.0.post2" in bug and "TORCH_NPU_IPC_COPIES=0" in bug, bug
        assert known_torch_npu_bugs(version, task_queue=True) == []
    for version in ("2.6.0.post2", "2.6.0.post3", "2.7.1", "2.13.0", ""):
        assert known_torch_npu_bugs(version, task_queue=False) == []
