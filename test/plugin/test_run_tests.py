"""``make test``'s runner: the suite in parts side by side, none lost, every failure shown and counted.

The runner (tools/run_tests.py) starts one pytest per part with ``--shard
K/N`` (test/conftest.py). These tests check that the parts split a selection
exactly, and run the runner end to end on a planted suite with a failing
test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mode_independent

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tools" / "run_tests.py"


def _collected(*args: str, cwd: Path) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_parts_split_the_selection_exactly(tmp_path: Path) -> None:
    suite = _planted(tmp_path)
    whole = _collected("test_planted.py", cwd=suite)
    assert len(whole) == 9, whole
    parts = [_collected("test_planted.py", "--shard", f"{k}/4", cwd=suite) for k in (1, 2, 3, 4)]
    assert sorted(n for part in parts for n in part) == sorted(whole), "the parts together must be the whole selection"
    assert all(len(set(a) & set(b)) == 0 for i, a in enumerate(parts) for b in parts[i + 1 :]), parts
    assert max(map(len, parts)) - min(map(len, parts)) <= 1, [len(p) for p in parts]
    # -k applies before the split: the parts share out what it kept.
    kept = _collected("test_planted.py", "-k", "not test_fails", cwd=suite)
    assert len(kept) == 8, kept
    halves = [_collected("test_planted.py", "-k", "not test_fails", "--shard", f"{k}/2", cwd=suite) for k in (1, 2)]
    assert sorted(n for half in halves for n in half) == sorted(kept), (halves, kept)


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1", "a/b"])
def test_a_bad_shard_is_refused(spec: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--shard", spec],
        cwd=ROOT / "test" / "aclsim",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 4, out.stdout + out.stderr  # pytest's usage error
    assert "--shard" in out.stderr, out.stderr


PLANTED = """
import warnings

import pytest

@pytest.mark.parametrize("n", range(6))
def test_passes(n):
    assert n * 2 == n + n

def test_fails():
    assert 2 + 2 == 5, "planted failure"

@pytest.mark.parametrize("n", range(2))
def test_warns(n):
    warnings.warn(UserWarning(f"planted warning {n}"))
    assert n in (0, 1)
"""


def _planted(tmp_path: Path) -> Path:
    """Eight passing tests (two warn) and one failing, under the project's conftest (which adds --shard)."""
    shutil.copy(ROOT / "test" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_planted.py").write_text(PLANTED)
    return tmp_path


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUNNER), *args, "-p", "no:cacheprovider"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_part_runs_and_a_failure_anywhere_fails_the_run(tmp_path: Path) -> None:
    out = _run(_planted(tmp_path), "--jobs", "3", "-q", "test_planted.py")
    text = out.stdout
    assert out.returncode == 1, text + out.stderr
    assert "== part 2/3" in text and "== part 3/3" in text, text
    assert "planted failure" in text, text
    assert text.count("exit 0: ") + text.count("exit 1: ") == 3, text  # one line per part
    assert "all parts: 1 failed, 8 passed, 2 warnings" in text, text


def test_a_part_without_summary_line_leaves_the_counts_unknown(tmp_path: Path) -> None:
    """pytest -qq prints no summary line: the runner says the counts are unknown, not that no tests ran."""
    out = _run(_planted(tmp_path), "--jobs", "2", "-qq", "test_planted.py")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "all parts: counts unknown (a part printed no summary line)" in out.stdout, out.stdout
    assert "no tests ran" not in out.stdout, out.stdout
    # A file without tests: pytest's own "no tests ran" line, in each part and in the totals.
    (tmp_path / "test_empty.py").write_text("")
    empty = _run(tmp_path, "--jobs", "2", "-q", "test_empty.py")
    assert empty.returncode == 5, empty.stdout + empty.stderr
    assert empty.stdout.count(": exit 5: no tests ran") == 2, empty.stdout
    assert "all parts: no tests ran in " in empty.stdout, empty.stdout


def test_parts_with_nothing_selected_count_as_passed(tmp_path: Path) -> None:
    out = _run(_planted(tmp_path), "--jobs", "2", "-q", "test_planted.py", "-k", "test_passes and 3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all parts: 1 passed" in out.stdout, out.stdout
    nothing = _run(_planted(tmp_path), "--jobs", "2", "-q", "test_planted.py", "-k", "no_such_test")
    assert nothing.returncode == 5, nothing.stdout + nothing.stderr  # pytest's "no tests collected"


def test_one_job_is_plain_pytest(tmp_path: Path) -> None:
    out = _run(_planted(tmp_path), "--jobs", "1", "-q", "test_planted.py")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 failed, 8 passed, 2 warnings" in out.stdout and "part " not in out.stdout, out.stdout


def test_parts_leave_the_cache_alone_and_options_that_use_it_run_one_pytest(tmp_path: Path) -> None:
    suite = _planted(tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args], cwd=suite, capture_output=True, text=True, timeout=300, check=False
        )

    parts = run(str(RUNNER), "--jobs", "2", "-q", "test_planted.py")
    assert parts.returncode == 1 and "all parts: 1 failed, 8 passed" in parts.stdout, parts.stdout + parts.stderr
    assert not (suite / ".pytest_cache").exists(), "a part wrote pytest's cache"
    out = run(str(RUNNER), "--jobs", "2", "-q", "test_planted.py", "--lf")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "--lf uses pytest's cache, which parts stay out of: running one pytest" in out.stdout, out.stdout
    assert "1 failed, 8 passed" in out.stdout and "part " not in out.stdout, out.stdout
    assert (suite / ".pytest_cache").exists(), "the one pytest keeps its cache"


@pytest.mark.parametrize("jobs", ["0", "two", "-1"])
def test_a_bad_job_count_is_refused(tmp_path: Path, jobs: str) -> None:
    out = subprocess.run(
        [sys.executable, str(RUNNER), "-q", "test_planted.py"],
        cwd=_planted(tmp_path),
        env=dict(os.environ, TEST_JOBS=jobs),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"--jobs (or TEST_JOBS) must be a whole number, 1 or more; got '{jobs}'" in out.stderr, out.stderr
