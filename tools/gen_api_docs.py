"""Write docs/api.md, the API reference, from the public names' docstrings.

    python tools/gen_api_docs.py            # rewrite docs/api.md
    python tools/gen_api_docs.py --check    # exit 1 if docs/api.md is stale

The docstrings are the source of truth; test/plugin/test_api_docs.py fails
when docs/api.md does not match them.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api.md"

# (heading, qualified names) in the order the reference presents them.
SECTIONS: list[tuple[str, list[str]]] = [
    (
        "Interprocess events",
        [
            "torch_npu_ipc.Event",
            "torch_npu_ipc.Event.ipc_handle",
            "torch_npu_ipc.Event.from_ipc_handle",
            "torch_npu_ipc.Event.record",
            "torch_npu_ipc.Event.wait",
            "torch_npu_ipc.Event.query",
            "torch_npu_ipc.Event.synchronize",
            "torch_npu_ipc.reductions.reduce_event",
            "torch_npu_ipc.reductions.rebuild_event",
        ],
    ),
    (
        "Tensor sharing",
        [
            "torch_npu_ipc.export_tensor",
            "torch_npu_ipc.import_tensor",
            "torch_npu_ipc.ipc_collect",
            "torch_npu_ipc.sharing_stats",
            "torch_npu_ipc.safe_globals",
        ],
    ),
    (
        "Cross-device copies",
        [
            "torch_npu_ipc.copies.enable",
            "torch_npu_ipc.copies.disable",
            "torch_npu_ipc.copies.is_enabled",
            "torch_npu_ipc.copies.disabled",
            "torch_npu_ipc.copies.status",
            "torch_npu_ipc.event_guard.status",
        ],
    ),
    (
        "External streams",
        [
            "torch_npu_ipc.ExternalStream",
            "torch_npu_ipc.ExternalStream.fence",
            "torch_npu_ipc.ExternalStream.synchronize",
            "torch_npu_ipc.ExternalStream.query",
            "torch_npu_ipc.ExternalStream.record_event",
            "torch_npu_ipc.ExternalStream.wait_event",
            "torch_npu_ipc.ExternalStream.wait_stream",
        ],
    ),
]


def _resolve(qualname: str) -> Any:
    import importlib

    parts = qualname.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(qualname)


def _signature(obj: Any) -> str:
    target = obj.__new__ if inspect.isclass(obj) and "__new__" in vars(obj) else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return "(...)"
    params = [p for name, p in sig.parameters.items() if name not in ("self", "cls")]
    return str(sig.replace(parameters=params))


def render() -> str:
    """The whole of docs/api.md."""
    import torch_npu_ipc  # noqa: F401  (selects the runtime first)

    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `python tools/gen_api_docs.py`; do not edit by hand.",
        "Import `torch_npu_ipc` before `torch` (it selects CANN or aclsim).",
        "",
    ]
    for heading, names in SECTIONS:
        out += [f"## {heading}", ""]
        for name in names:
            obj = _resolve(name)
            kind = "class " if inspect.isclass(obj) else ""
            doc = inspect.getdoc(obj) or "(no docstring)"
            out += [f"### `{kind}{name}{_signature(obj)}`", "", "```text", doc, "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python tools/gen_api_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
