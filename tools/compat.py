"""Build and test torch_npu_ipc against another torch_npu release, on aclsim.

    python tools/compat.py 2.7.1 [--keep-venv] [-- PYTEST_ARGS...]   (default PYTEST_ARGS: test -q)

The project is pinned to torch 2.13.0 + torch-npu 2.13.0; this checks the
claim that it works on torch_npu releases that lack the native features
(2.7.1 has no Event IPC and no ExternalStream). In ``build/compat-VERSION/``
it makes a venv with that torch_npu and its matching torch, copies the
working tree (tracked and untracked, not ignored files), installs it there
(editable: aclsim and the plugin are built against that torch_npu), then
runs ``doctor``, the demo and the test suite.

torch-npu wheels on PyPI pin a ``+cpu`` torch that only download.pytorch.org
serves, so torch is taken from PyPI (a CUDA build of the same version: about
5 GB with its NVIDIA libraries, which torch needs to import; no GPU is used)
and torch-npu is installed without dependencies. Torch-free, like the rest
of ``tools/``. Exit status: that of the first step that failed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ["pybind11>=2.12", "ninja>=1.11", "setuptools>=70", "wheel", "pytest>=8", "hypothesis>=6.100"]
# What torch_npu imports but older wheels do not declare (2.7.1 declares only torch; 2.13 adds these).
TORCH_NPU_IMPORTS = ["pyyaml", "numpy"]


def torch_for(torch_npu: str) -> str:
    """The torch release a torch_npu release is built for: its version without ``.postN`` / ``rcN``."""
    m = re.fullmatch(r"(\d+\.\d+\.\d+)(?:\.?(?:post|rc)\d+)*", torch_npu)
    if m is None:
        raise SystemExit(f"compat: {torch_npu!r} is not a torch_npu release number such as 2.7.1 or 2.6.0.post3")
    return m.group(1)


def run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, check=False, **kwargs).returncode  # type: ignore[call-overload]
    if rc != 0:
        raise SystemExit(rc)


def copy_tree(dest: Path) -> None:
    """The working tree's tracked and untracked (not ignored) files, without built artifacts."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    if dest.exists():
        shutil.rmtree(dest)
    for rel in filter(None, out.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pytest_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="Arguments after -- go to pytest, instead of the default: test -q."
    )
    parser.add_argument("torch_npu", help="torch_npu release to test against, e.g. 2.7.1")
    parser.add_argument("--keep-venv", action="store_true", help="reuse build/compat-VERSION/venv if it exists")
    args = parser.parse_args(own)

    base = ROOT / "build" / f"compat-{args.torch_npu}"
    venv, src = base / "venv", base / "src"
    py = venv / "bin" / "python"
    if not (args.keep_venv and py.exists()):
        if venv.exists():
            shutil.rmtree(venv)
        run([sys.executable, "-m", "venv", str(venv)])
        deps = [f"torch=={torch_for(args.torch_npu)}", *TOOLS, *TORCH_NPU_IMPORTS]
        run([str(py), "-m", "pip", "install", "--quiet", *deps])
        run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", f"torch-npu=={args.torch_npu}"])
    copy_tree(src)
    env = dict(os.environ, ACLSIM_DEVICES=os.environ.get("ACLSIM_DEVICES", "4"))
    # Editable, so that the tests' subprocesses import it too; --no-deps: torch and torch-npu are in place.
    run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e", str(src)], env=env)
    run([str(py), "-m", "torch_npu_ipc", "doctor"], cwd=src, env=env)
    run([str(py), "-m", "torch_npu_ipc.demo"], cwd=src, env=env)
    # As `make test` runs it: two parts side by side (TEST_JOBS=1: one pytest).
    run([str(py), "tools/run_tests.py", *(pytest_args or ["test", "-q"])], cwd=src, env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
