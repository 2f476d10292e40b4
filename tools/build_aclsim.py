"""Build the aclsim shared libraries (CANN's library names, CPU implementation).

Torch-free on purpose: it runs from setup.py before torch can be imported
and can also be run by hand::

    python tools/build_aclsim.py --out aclsim/lib

The ACL ABI comes from CANN's headers as shipped inside the torch_npu wheel
(``torch_npu/include/acl``); the wheel is located without importing it,
since importing torch_npu needs the very libraries built here.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "csrc" / "aclsim"
ACL_ABI = ROOT / "csrc" / "acl_abi"  # the ABI header aclsim and the plugin share

# soname -> (source directory or file list, libraries it links against)
LIBRARIES: dict[str, tuple[list[str], list[str]]] = {
    "libascendcl.so": (["runtime/*.cpp"], ["pthread"]),
    "libopapi.so": (["opapi/*.cpp"], ["ascendcl"]),
    "libhccl.so": (["extra/hccl.cpp"], []),
    "libascend_hal.so": (["extra/ascend_hal.cpp"], ["ascendcl"]),
    # Libraries torch_npu NEEDs or dlopens whose functions libascendcl.so
    # implements: empty, forwarding through DT_NEEDED.
    "libacl_op_compiler.so": (["extra/forward.cpp"], ["ascendcl"]),
    "libge_runner.so": (["extra/forward.cpp"], ["ascendcl"]),
    "libgraph.so": (["extra/graph.cpp"], ["ascendcl"]),
    "libacl_tdt_channel.so": (["extra/forward.cpp"], ["ascendcl"]),
    "libruntime.so": (["extra/forward.cpp"], ["ascendcl"]),
}

# Debug info makes the object files many times larger and costs a third of the
# compile time; TORCH_NPU_IPC_DEBUG=1 keeps it (setup.py reads the same variable).
DEBUG_INFO = os.environ.get("TORCH_NPU_IPC_DEBUG", "0") == "1"

CXXFLAGS = [
    "-std=c++17",
    "-O2",
    "-g" if DEBUG_INFO else "-g0",
    "-fPIC",
    "-Wall",
    "-Wextra",
    "-Werror=return-type",
    "-fvisibility=hidden",
    "-fvisibility-inlines-hidden",
]


def find_acl_include_dir() -> Path | None:
    """Return the directory holding ``acl/acl.h`` in the installed torch_npu wheel, or None.

    torch_npu 2.13 ships it under ``include/``; older wheels (2.7.1) under
    ``include/third_party/acl/inc/``. None when torch_npu is not installed or
    ships no ``acl/acl.h``. Does not import torch_npu (which cannot load before
    aclsim is built).
    """
    spec = importlib.util.find_spec("torch_npu")
    locations = spec.submodule_search_locations if spec is not None else None
    for loc in locations or []:
        for inc in (Path(loc) / "include", Path(loc) / "include" / "third_party" / "acl" / "inc"):
            if (inc / "acl" / "acl.h").is_file():
                return inc
    return None


def acl_include_dir() -> Path:
    """Like :func:`find_acl_include_dir`, but stops the build with a message naming the fix."""
    inc = find_acl_include_dir()
    if inc is None:
        if importlib.util.find_spec("torch_npu") is None:
            raise SystemExit("aclsim build: torch_npu is not installed (pip install torch-npu==2.13.0)")
        raise SystemExit("aclsim build: this torch_npu wheel ships no acl/acl.h")
    return inc


# Types and enumerators of CANN's ABI that csrc/acl_abi/acl_abi.h declares
# when the installed ACL headers lack them (macros it tests itself).
ACL_ABI_NAMES = (
    "aclrtIpcEventHandle",
    "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE",
    "ACL_MEM_LOCATION_TYPE_UNREGISTERED",
    "aclrtPtrAttributes",
    "aclrtHostFunc",
    "aclrtBinHandle",
    "aclrtFuncHandle",
    "aclrtBinaryLoadOptions",
)


def acl_abi_defines(include_dir: Path | None = None) -> list[str]:
    """Compiler flags ``-DACL_ABI_LACKS_<name>`` for each name the ACL headers do not declare."""
    acl = (include_dir or acl_include_dir()) / "acl"
    text = "\n".join(h.read_text(errors="replace") for h in sorted(acl.rglob("*.h")))
    return [f"-DACL_ABI_LACKS_{name}" for name in ACL_ABI_NAMES if re.search(rf"\b{name}\b", text) is None]


def sources(patterns: list[str]) -> list[Path]:
    out: list[Path] = []
    for pat in patterns:
        out.extend(sorted(SRC.glob(pat)))
    return out


def write_ninja(build_dir: Path, out_dir: Path, cxx: str) -> Path:
    inc = acl_include_dir()
    lines = [
        f"cxx = {cxx}",
        f"cxxflags = {' '.join(CXXFLAGS + acl_abi_defines(inc))} -I{SRC / 'include'} -I{ACL_ABI} -I{inc}",
        "rule cxx",
        "  command = $cxx -MMD -MF $out.d $cxxflags -c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = CXX $in",
        "rule link",
        "  command = $cxx -shared -o $out $in -Wl,-soname,$soname -Wl,--no-undefined "
        "-Wl,-rpath,'$$ORIGIN' -L$libdir -Wl,--no-as-needed $libs $ldflags",
        "  description = LINK $out",
    ]
    compiled: set[Path] = set()
    for soname, (pats, libs) in LIBRARIES.items():
        objs = []
        for src in sources(pats):
            obj = build_dir / (str(src.relative_to(SRC)).replace("/", "_") + ".o")
            if obj not in compiled:
                lines.append(f"build {obj}: cxx {src}")
                compiled.add(obj)
            objs.append(str(obj))
        if not objs:
            raise SystemExit(f"aclsim build: no sources for {soname}")
        deps = [str(out_dir / f"lib{lib}.so") for lib in libs if lib == "ascendcl"]
        implicit = f" | {' '.join(deps)}" if deps else ""
        lines.append(f"build {out_dir / soname}: link {' '.join(objs)}{implicit}")
        lines.append(f"  soname = {soname}")
        lines.append(f"  libdir = {out_dir}")
        lines.append("  libs = " + " ".join(f"-l{lib}" for lib in libs))
        # A library may pin its exported names (standard-library template
        # instances escape -fvisibility=hidden otherwise).
        version_script = SRC / pats[0].split("/")[0] / "exports.map"
        lines.append(
            f"  ldflags = -Wl,--version-script={version_script}" if version_script.is_file() else "  ldflags ="
        )
    path = build_dir / "build.ninja"
    path.write_text("\n".join(lines) + "\n")
    return path


def build(out_dir: Path, build_dir: Path | None = None, verbose: bool = False) -> list[Path]:
    """Compile every aclsim library into ``out_dir``; returns their paths."""
    out_dir = out_dir.resolve()
    build_dir = (build_dir or ROOT / "build" / "aclsim").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    build_dir.mkdir(parents=True, exist_ok=True)
    cxx = os.environ.get("CXX", "g++")
    ninja_file = write_ninja(build_dir, out_dir, cxx)
    ninja = shutil.which("ninja")
    if ninja is None:
        try:
            import ninja as ninja_pkg

            ninja = str(Path(ninja_pkg.BIN_DIR) / "ninja")
        except ImportError as exc:
            raise SystemExit("aclsim build: ninja is required (pip install ninja)") from exc
    cmd = [ninja, "-f", str(ninja_file)] + (["-v"] if verbose else [])
    subprocess.run(cmd, check=True, cwd=build_dir)
    return [out_dir / name for name in LIBRARIES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "aclsim" / "lib")
    parser.add_argument("--build-dir", type=Path, default=None)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    for lib in build(args.out, args.build_dir, args.verbose):
        print(lib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
