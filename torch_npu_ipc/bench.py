"""``python -m torch_npu_ipc.bench``: every benchmark of the project in one run.

Each benchmark lives in ``bench/<name>.py`` of the source tree and exposes
``main(argv) -> dict``; this runner calls them in turn and prints a summary
of their results. Ratios are measured side by side within one run; they are
printed, never asserted. The run ends with a summary of every median,
ratio and goal, and ``--plot out.png`` draws the ratios when matplotlib is
installed. ``--quick`` runs each benchmark with the short arguments its
module lists in ``QUICK_ARGS`` (a smoke run: the figures are noisier). A
module that sets ``NEEDS_IPC_EVENTS`` is skipped, with the reason, on a
machine without interprocess events: it would time a fallback under the
events' name.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import torch_npu_ipc  # noqa: F401  (selects CANN or aclsim before torch loads)

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"


def _load(path: Path) -> ModuleType:
    """Import ``bench/<name>.py`` as the top-level module ``<name>``.

    A benchmark that starts processes with the ``spawn`` method pickles its
    functions by module name, and the children must import that module too:
    they get the parent's ``sys.path``, so putting ``bench/`` on it makes the
    name importable in both.
    """
    directory = str(path.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return importlib.import_module(path.stem)


# Keys (after flattening) worth repeating in the summary.
_SUMMARY_WORDS = ("median", "ratio", "goal", "per_s", "fraction", "speedup", "vs_")


def flatten(results: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for key, value in results.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def summary(results: dict[str, Any]) -> list[tuple[str, Any]]:
    """The medians, ratios and goals of every benchmark, in run order."""
    rows = []
    for key, value in flatten(results).items():
        if isinstance(value, (int, float)) and any(w in key for w in _SUMMARY_WORDS):
            rows.append((key, value))
    return rows


def plot(rows: list[tuple[str, Any]], path: Path) -> bool:
    """Draw the ratios as horizontal bars into ``path``; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ratios = [(k, float(v)) for k, v in rows if any(w in k for w in ("ratio", "fraction", "vs_", "speedup"))]
    fig, ax = plt.subplots(figsize=(9, 0.4 * max(len(ratios), 1) + 1.5))
    ax.barh([k for k, _ in ratios], [v for _, v in ratios])
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("ratio (measured side by side in one run)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _ipc_events_missing() -> str:
    """Why this machine has no interprocess events ("" when it has them)."""
    import torch

    from torch_npu_ipc import _C

    if torch.npu.device_count() == 0:
        return "no NPU visible"
    return _C._ipc_event_unsupported_reason(torch.npu.current_device())


def require_ipc_events(what: str) -> None:
    """Exit with the reason when this machine has no interprocess events (a benchmark run alone).

    ``what`` says what the benchmark measures; without events it would time a fallback instead.
    """
    missing = _ipc_events_missing()
    if missing:
        raise SystemExit(f"{what}, which needs interprocess events: {missing}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_npu_ipc.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="benchmark names (files in bench/) to run")
    parser.add_argument("--json", type=Path, help="write all results to this file")
    parser.add_argument("--plot", type=Path, help="draw the ratios into this PNG (needs matplotlib)")
    parser.add_argument("--quick", action="store_true", help="short runs (each benchmark's QUICK_ARGS)")
    args = parser.parse_args(argv)
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        # Checked before the benchmarks run, not after: their results would be lost.
        if path is not None and not (path.parent.is_dir() and os.access(path.parent, os.W_OK)):
            parser.error(f"{option}: cannot write {path} (its folder does not exist or is not writable)")
    if not BENCH_DIR.is_dir():
        print(
            f"benchmarks live in the source tree ({BENCH_DIR} not found: this torch_npu_ipc was installed "
            "from a wheel); run them from a clone of the project, installed with "
            "`pip install --no-build-isolation -e .`",
            file=sys.stderr,
        )
        return 2
    known = sorted(p.stem for p in BENCH_DIR.glob("*.py") if not p.stem.startswith("_"))
    unknown = sorted(set(args.only or []) - set(known))
    if unknown:
        names = ", ".join(known)
        print(f"--only: no benchmark named {', '.join(unknown)}; the benchmarks are {names}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {}
    failed = False
    if args.quick:
        print("--quick: short smoke runs; their figures are noisier than a full run's")
    for path in sorted(BENCH_DIR.glob("*.py")):
        if path.stem.startswith("_") or (args.only and path.stem not in args.only):
            continue
        print(f"=== {path.stem}")
        try:
            module = _load(path)
            missing = _ipc_events_missing() if getattr(module, "NEEDS_IPC_EVENTS", False) else ""
            if missing:
                # It would time a fallback under the events' name: say so instead.
                print(f"[SKIP] {path.stem} measures interprocess events: {missing}")
                results[path.stem] = {"skipped": missing}
                continue
            results[path.stem] = module.main(list(getattr(module, "QUICK_ARGS", [])) if args.quick else [])
        except Exception:  # report and go on to the next benchmark
            traceback.print_exc()
            results[path.stem] = {"error": True}
            failed = True
    rows = summary(results)
    print("=== summary (medians, ratios, goals)")
    for key, value in rows:
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"  {key:60s} {text}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    if args.plot:
        if plot(rows, args.plot):
            print(f"plot written to {args.plot}")
        else:
            print("--plot: matplotlib is not installed (pip install matplotlib); no plot written")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
