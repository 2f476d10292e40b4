"""Build the IPC event samples with g++ against plain ACL headers.

The headers are the copy torch_npu ships (``torch_npu/include/acl/acl.h``);
the library is aclsim's ``libascendcl.so`` unless another directory is given
(e.g. a real CANN ``lib64``). No CMake needed::

    python csrc/aclsim/samples/build.py [--out DIR] [--acl-lib DIR]

``build()`` is what the tests call.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

SAMPLES_DIR = Path(__file__).resolve().parent
SAMPLES = ("ipc_event_handshake", "ipc_event_multi_device")
DEFAULT_OUT = SAMPLES_DIR.parents[2] / "build" / "samples"
COMPILE_TIMEOUT_S = 300


class HeadersTooOld(RuntimeError):
    """The ACL headers found declare no IPC event API (an older torch_npu wheel's copy)."""


def acl_include_dir() -> Path:
    """Return the directory holding ``acl/acl.h`` (torch_npu's copy), without importing torch_npu.

    torch_npu 2.13 ships it under ``include/``, older wheels under
    ``include/third_party/acl/inc/``. Raises :class:`HeadersTooOld` when
    those headers lack the IPC event API the samples call (torch_npu
    2.7.1's): the samples are plain CANN code, written against CANN 8.x
    headers, so point ACL_INCLUDE_DIR at such headers instead.
    """
    env = os.environ.get("ACL_INCLUDE_DIR")
    if env:
        return Path(env)
    inc = _repo_module("tools", "build_aclsim").find_acl_include_dir()
    if inc is None:
        raise RuntimeError("no acl/acl.h in an installed torch_npu; set ACL_INCLUDE_DIR to a directory holding it")
    if "aclrtIpcGetEventHandle" not in (inc / "acl" / "acl_rt.h").read_text(errors="replace"):
        raise HeadersTooOld(
            f"the ACL headers in {inc} declare no IPC event API (aclrtIpcGetEventHandle); "
            "set ACL_INCLUDE_DIR to CANN 8.x headers"
        )
    return inc


def _repo_module(subdir: str, name: str) -> Any:
    """Import ``name`` from ``subdir`` of the repository (``""`` for its root)."""
    path = str(SAMPLES_DIR.parents[2] / subdir)
    sys.path.insert(0, path)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(path)


def default_acl_lib_dir() -> Path:
    """Return aclsim's library directory (where ``libascendcl.so`` is)."""
    return _repo_module("", "aclsim").lib_dir()


def _up_to_date(binary: Path, inputs: list[Path]) -> bool:
    if not binary.is_file():
        return False
    built = binary.stat().st_mtime
    return all(p.stat().st_mtime <= built for p in inputs)


def build(out_dir: Path | str | None = None, acl_lib: Path | str | None = None, force: bool = False) -> dict[str, Path]:
    """Compile every sample into ``out_dir``; return ``{name: binary path}``.

    Rebuilds only what is older than its sources, the shared header or the
    ACL library. Raises RuntimeError with the compiler's output on failure.
    """
    cxx = os.environ.get("CXX") or shutil.which("g++")
    if not cxx:
        raise RuntimeError("g++ not found (set CXX)")
    out = Path(out_dir) if out_dir is not None else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    lib = Path(acl_lib) if acl_lib is not None else default_acl_lib_dir()
    inc = acl_include_dir()
    header = SAMPLES_DIR / "sample_util.h"
    binaries: dict[str, Path] = {}
    for name in SAMPLES:
        src = SAMPLES_DIR / f"{name}.cpp"
        binary = out / name
        if force or not _up_to_date(binary, [src, header, lib / "libascendcl.so"]):
            tmp = out / f".{name}.tmp{os.getpid()}"
            cmd = [
                cxx, "-std=c++17", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-pthread",
                f"-I{inc}", str(src), "-o", str(tmp),
                f"-L{lib}", "-lascendcl", f"-Wl,-rpath,{lib}",
            ]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
            if proc.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise RuntimeError(f"building {name} failed:\n{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
            tmp.replace(binary)  # atomic: a concurrent build never sees half a binary
        binaries[name] = binary
    return binaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    parser.add_argument("--acl-lib", type=Path, default=None, help="directory of libascendcl.so (default: aclsim)")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    for name, path in build(args.out, args.acl_lib, args.force).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
