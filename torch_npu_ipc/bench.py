"""``python -m torch_npu_ipc.bench``: every benchmark of the project in one run.

Each benchmark lives in ``bench/<name>.py`` of the source tree and exposes
``main(argv) -> dict``; this runner calls them in turn and prints a summary
of their results. Ratios are measured side by side within one run; they are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import torch_npu_ipc  # noqa: F401  (selects CANN or aclsim before torch loads)

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"torch_npu_ipc_bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="benchmark names (files in bench/) to run")
    parser.add_argument("--json", type=Path, help="write all results to this file")
    args = parser.parse_args(argv)
    if not BENCH_DIR.is_dir():
        print(f"benchmarks live in the source tree ({BENCH_DIR} not found)", file=sys.stderr)
        return 2
    results: dict[str, Any] = {}
    failed = False
    for path in sorted(BENCH_DIR.glob("*.py")):
        if path.stem.startswith("_") or (args.only and path.stem not in args.only):
            continue
        print(f"=== {path.stem}")
        try:
            results[path.stem] = _load(path).main([])
        except Exception:  # report and go on to the next benchmark
            traceback.print_exc()
            results[path.stem] = {"error": True}
            failed = True
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
