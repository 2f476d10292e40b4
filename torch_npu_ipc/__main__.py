"""``python -m torch_npu_ipc doctor`` prints the environment report; ``demo`` and ``bench`` run those modules."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "doctor"
    if command == "doctor":
        from torch_npu_ipc.doctor import main as doctor

        return doctor(args[1:])
    if command == "demo":
        from torch_npu_ipc.demo import main as demo

        return demo(args[1:])
    if command == "bench":
        from torch_npu_ipc.bench import main as bench

        return bench(args[1:])
    usage = (
        "usage: python -m torch_npu_ipc [doctor [--help] | demo [--help] | bench [--help]]\n"
        "  doctor  what runs where: versions, devices, native features, the path each feature takes\n"
        "  demo    handshake, fan-out and pipelined handoff between processes, ending in [SUCCESS] or [FAILURE]\n"
        "  bench   every benchmark, with a summary of medians and ratios"
    )
    if command in ("-h", "--help", "help"):
        print(usage)
        return 0
    print(f"{usage}\nunknown command {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
