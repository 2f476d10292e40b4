"""Build torch_npu_ipc (C++ core through torch.utils.cpp_extension) and aclsim (CANN simulator libraries).

Install with ``pip install --no-build-isolation -e .``: the build needs the
installed torch and torch_npu (pinned in requirements.txt), which an isolated
build environment would not have.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

# torch autoloads torch_npu, which cannot load before aclsim is built.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))
import build_aclsim  # noqa: E402


def torch_npu_dir() -> Path:
    spec = importlib.util.find_spec("torch_npu")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torch_npu is not installed: pip install -r requirements.txt")
    return Path(next(iter(spec.submodule_search_locations)))


class BuildWithSimulator(BuildExtension):
    """Builds the aclsim libraries first: linking against libtorch_npu.so needs CANN's libraries."""

    def run(self) -> None:
        lib_out = ROOT / "aclsim" / "lib" if self.inplace else Path(self.build_lib) / "aclsim" / "lib"
        build_aclsim.build(lib_out, Path(self.build_temp) / "aclsim")
        self._aclsim_lib = lib_out
        for ext in self.extensions:
            ext.extra_link_args.append(f"-Wl,-rpath-link,{lib_out}")
        super().run()

    def copy_file(self, infile: str, outfile: str, *args: Any, **kwargs: Any) -> Any:
        """Install a built library by rename, not by rewriting it in place.

        ``build_ext --inplace`` copies the extension over the one in the
        source tree; writing into that file would change the pages of every
        process that has it loaded (a test run during a rebuild then aborts).
        A new file renamed over the old one leaves those processes alone.
        """
        if not str(outfile).endswith(".so"):
            return super().copy_file(infile, outfile, *args, **kwargs)
        tmp = f"{outfile}.tmp{os.getpid()}"
        result = super().copy_file(infile, tmp, *args, **kwargs)
        os.replace(tmp, outfile)
        return (outfile, result[1]) if isinstance(result, tuple) else result


NPU = torch_npu_dir()
ext = CppExtension(
    name="torch_npu_ipc._C",
    sources=sorted(glob.glob("csrc/plugin/*.cpp")),
    include_dirs=[
        str(ROOT / "csrc" / "plugin"),
        str(ROOT / "csrc" / "acl_abi"),
        *dict.fromkeys([str(NPU / "include"), str(build_aclsim.acl_include_dir())]),
    ],
    library_dirs=[str(NPU / "lib")],
    libraries=["torch_npu"],
    # -g0 overrides the -g of Python's own flags (a third of the compile time; see build_aclsim.DEBUG_INFO).
    extra_compile_args=[
        "-std=c++17",
        "-O2",
        "-g" if build_aclsim.DEBUG_INFO else "-g0",
        "-Wall",
        "-Wno-unused-parameter",
        *build_aclsim.acl_abi_defines(),
    ],
    extra_link_args=[f"-Wl,-rpath,{NPU / 'lib'}", "-ldl"],
)

setup(
    name="torch_npu_ipc",
    version="0.1.0",
    description=(
        "Interprocess synchronization for PyTorch on Ascend NPUs "
        "(IPC events, shared tensors, p2p copies, external streams)"
    ),
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["torch_npu_ipc", "torch_npu_ipc.*", "aclsim", "aclsim.*"]),
    package_data={"aclsim": ["lib/*.so", "cann_home/*/README.txt"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildWithSimulator},
    # The extension is built against the torch / torch_npu installed at build time (no build
    # isolation): any tested release from 2.6 on. requirements.txt pins the CPU set CI runs.
    install_requires=["torch>=2.6", "torch-npu>=2.6"],
    entry_points={"console_scripts": ["aclsim = aclsim.__main__:main"]},
    zip_safe=False,
)
