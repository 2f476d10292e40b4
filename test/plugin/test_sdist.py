"""The source distribution carries everything needed to build and test: csrc/, docs/, tools/, tests."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.mode_independent

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("csrc", "docs", "tools", "aclsim", "torch_npu_ipc", "test", "bench")


def _source_files() -> set[str]:
    """Every source file of the shipped trees (build products excluded)."""
    out = set()
    for top in SHIPPED:
        for p in (ROOT / top).rglob("*"):
            rel = p.relative_to(ROOT)
            if p.is_file() and "__pycache__" not in rel.parts and p.suffix not in (".so", ".o", ".pyc"):
                if rel.parts[:2] != ("aclsim", "lib"):
                    out.add(str(rel))
    return out


def test_sdist_contains_sources(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (archive,) = tmp_path.glob("torch_npu_ipc-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for must in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "requirements.txt", "Makefile"):
        assert must in names, must
    missing = sorted(_source_files() - names)
    assert not missing, f"not in the sdist (fix MANIFEST.in): {missing[:20]}"
