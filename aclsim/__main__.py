"""Command line: ``aclsim [--devices N] [--soc NAME] -- CMD ARGS...`` runs CMD on the simulator."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from aclsim._env import _ENV_KEYS, DEFAULT_DEVICES, MAX_DEVICES, devices_from_env, simulator_env


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        split = argv.index("--")
        opts, cmd = argv[:split], argv[split + 1 :]
    else:
        opts, cmd = argv, []
    parser = argparse.ArgumentParser(
        prog="aclsim",
        description="Run a command on aclsim, the CPU simulator of the CANN runtime.",
        epilog="example: aclsim --devices 4 -- python -c 'import torch, torch_npu; print(torch.npu.device_count())'",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=None,
        help=f"simulated devices, 1..{MAX_DEVICES} (default: $ACLSIM_DEVICES, else {DEFAULT_DEVICES})",
    )
    parser.add_argument("--soc", default=None, help="SoC name reported to torch_npu (default Ascend910B1)")
    parser.add_argument("--print-env", action="store_true", help="print the environment variables aclsim sets and exit")
    args = parser.parse_args(opts)
    if args.devices is None:
        try:
            args.devices = devices_from_env()
        except ValueError as exc:
            parser.error(str(exc))
    if not 1 <= args.devices <= MAX_DEVICES:
        parser.error(f"--devices must be between 1 and {MAX_DEVICES}")
    env = simulator_env(args.devices, args.soc)
    if args.print_env:
        for key in _ENV_KEYS:
            print(f"export {key}={env[key]}")
        return 0
    if not cmd:
        parser.error("no command given: aclsim [options] -- CMD ARGS...")
    exe = shutil.which(cmd[0], path=env.get("PATH"))
    if exe is None:
        print(f"aclsim: command not found: {cmd[0]}", file=sys.stderr)
        return 127
    os.execve(exe, cmd, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
