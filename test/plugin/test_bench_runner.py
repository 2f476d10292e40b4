"""``python -m torch_npu_ipc.bench``: runs the benchmarks it is asked for and summarizes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_npu_ipc import bench

pytestmark = pytest.mark.mode_independent


def test_summary_picks_medians_ratios_and_goals() -> None:
    results = {
        "copies": {"host_us": {"events": 90.0}, "ratio_to_same_device": {"events": 1.1}, "goal_met": True},
        "latency": {"event": {"median_us": 24.0, "n": 100}},
    }
    rows = dict(bench.summary(results))
    assert rows == {"copies.ratio_to_same_device.events": 1.1, "copies.goal_met": True, "latency.event.median_us": 24.0}


def _run_bench(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``python -m torch_npu_ipc.bench ARGS`` on two simulated devices; asserts it succeeded."""
    r = subprocess.run(
        [sys.executable, "-m", "torch_npu_ipc.bench", *args],
        env=dict(os.environ, ACLSIM_DEVICES="2", **extra_env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def test_runner_runs_one_benchmark_for_real(tmp_path: Path) -> None:
    out_json = tmp_path / "bench.json"
    png = tmp_path / "ratios.png"
    r = _run_bench("--only", "copies", "--json", str(out_json), "--plot", str(png))
    assert "=== copies" in r.stdout and "=== summary" in r.stdout
    assert "copies.ratio_to_same_device.events" in r.stdout
    data = json.loads(out_json.read_text())
    assert data["copies"]["ratio_to_same_device"]["same_device"] == 1.0
    assert data["copies"]["stream_syncs_per_call"]["events"] == 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in r.stdout and not png.exists()
    else:
        assert png.stat().st_size > 0


def test_runner_quick_runs_every_benchmark(tmp_path: Path) -> None:
    """``--quick`` runs each benchmark's QUICK_ARGS, including one that spawns processes from its own module."""
    out_json = tmp_path / "bench.json"
    r = _run_bench("--quick", "--json", str(out_json))
    assert r.stdout.startswith("--quick: short smoke runs")
    data = json.loads(out_json.read_text())
    names = sorted(p.stem for p in bench.BENCH_DIR.glob("*.py") if not p.stem.startswith("_"))
    assert sorted(data) == names
    assert not any(isinstance(v, dict) and v.get("error") for v in data.values())
    assert data["sharing"]["pipeline"]["events"]["tensors_per_s"] > 0
    assert data["copies"]["iters"] == 20


def test_runner_skips_event_benchmarks_without_ipc_events(tmp_path: Path) -> None:
    """On an NPU without interprocess events they would time the fallbacks under the events' names."""
    out_json = tmp_path / "bench.json"
    r = _run_bench("--quick", "--json", str(out_json), ACLSIM_IPC_EVENTS="0")
    data = json.loads(out_json.read_text())
    for name in ("copies", "ipc_event_latency", "sharing"):
        assert f"[SKIP] {name} measures interprocess events: this NPU does not support" in r.stdout, r.stdout
        assert "207000" in data[name]["skipped"], data[name]
    assert data["copy_hook"]["npu copy_"]["median_us_on"] > 0, data["copy_hook"]
    for name in ("copies", "sharing"):  # run alone, each says why it cannot measure
        module = bench._load(bench.BENCH_DIR / f"{name}.py")
        alone = subprocess.run(
            [sys.executable, str(module.__file__)],
            env=dict(os.environ, ACLSIM_DEVICES="2", ACLSIM_IPC_EVENTS="0"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert alone.returncode == 1 and "needs interprocess events: this NPU does not" in alone.stderr, alone.stderr


@pytest.mark.parametrize(
    ("name", "argv", "message"),
    [
        ("copies", ["--iters", "0"], "--iters and --numel must be >= 1"),
        ("copies", ["--pending", "0"], "--pending and --goal > 0"),
        ("copy_hook", ["--calls", "0"], "--blocks, --calls and --numel must be >= 1"),
        ("ipc_event_latency", ["--iters", "0"], "--iters must be >= 1"),
        ("sharing", ["--pipeline", "0"], "--repeat and --pipeline must be >= 1"),
        ("sharing", ["--iters", "990"], "--iters must be >= 1 and < 980"),
    ],
)
def test_benchmarks_refuse_counts_they_cannot_measure(
    name: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A count of zero used to fail deep in the run (an empty median, a pipeline that never warmed up)."""
    module = bench._load(bench.BENCH_DIR / f"{name}.py")
    with pytest.raises(SystemExit) as exc:
        module.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_only_names_an_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    """``--only`` with a typo used to run nothing and exit 0."""
    assert bench.main(["--only", "copies", "copeis"]) == 2
    err = capsys.readouterr().err
    assert "no benchmark named copeis" in err and "copies" in err


def test_only_without_names_and_unwritable_outputs_are_refused_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--only`` with no name ran every benchmark; ``--json`` into a missing folder failed after all of them."""
    for argv, message in (
        (["--only"], "expected at least one argument"),
        (["--json", str(tmp_path / "missing" / "x.json")], "--json: cannot write"),
        (["--plot", str(tmp_path / "missing" / "x.png")], "--plot: cannot write"),
    ):
        with pytest.raises(SystemExit) as exc:
            bench.main(argv)
        assert exc.value.code == 2
        captured = capsys.readouterr()
        assert message in captured.err and "===" not in captured.out, (argv, captured)


def test_without_the_source_tree_it_says_where_benchmarks_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Installed from a wheel, ``bench/`` is not there: exit 2 with the way to run them (seen 2026-12-05)."""
    monkeypatch.setattr(bench, "BENCH_DIR", tmp_path / "bench")
    assert bench.main(["--quick"]) == 2
    err = capsys.readouterr().err
    assert "installed from a wheel" in err and "pip install --no-build-isolation -e ." in err
