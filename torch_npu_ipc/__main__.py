"""``python -m torch_npu_ipc doctor`` prints the environment report; ``demo`` and ``bench`` run those modules."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "doctor"
    if command == "doctor":
        from torch_npu_ipc.doctor import main as doctor

        return doctor()
    if command == "demo":
        from torch_npu_ipc.demo import main as demo

        return demo(args[1:])
    if command == "bench":
        from torch_npu_ipc.bench import main as bench

        return bench(args[1:])
    print(f"usage: python -m torch_npu_ipc [doctor|demo|bench], got {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
