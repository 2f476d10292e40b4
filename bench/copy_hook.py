"""What the copy hook costs the copies it does not handle.

    python bench/copy_hook.py [--blocks N] [--calls N] [--json]

The plugin's copy hook (``torch_npu_ipc.copies``) shadows ``aten::copy_``
and ``aten::_to_copy`` to give NPU-to-other-NPU copies an event barrier, and
hands every other call to the kernel it shadows (it shadows
``aten::_local_scalar_dense`` too, see below). On torch 2.9 and later it
sits at the PrivateUse1 dispatch key, so only NPU tensors pass through it; on
older torch (torch_npu 2.8 and before) it sits at BackendSelect, which every
copy of every device passes, the CPU's included (see docs/copies.md).

Measured here, host time per call with the hook on and off, in alternating
blocks so that drifts in machine load hit both alike:

  npu copy_     same-device ``dst.copy_(src)`` of a small NPU tensor
  npu .cpu()    device to host
  npu from cpu  ``dst.copy_(cpu_src)``, host to device
  cpu copy_     ``dst.copy_(src)`` of two CPU tensors
  cpu .to()     ``t.to(torch.float64)`` of a CPU tensor
  npu .item()   ``Tensor.item()`` of an NPU tensor (``aten::_local_scalar_dense``, which the
                hook passes on unless a plugin thread took a failed queue's report)

The figure of merit is ``ratio_on_off`` per case (1.0 = free). ``main(argv)``
returns the results as a dict.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch_npu_ipc  # noqa: F401  (activates aclsim before torch is imported)

# isort: split
import torch

from torch_npu_ipc import copies

# ``python -m torch_npu_ipc.bench --quick``: a short smoke run.
QUICK_ARGS = ["--blocks", "4", "--calls", "50"]


def _cases(numel: int) -> dict[str, Callable[[], object]]:
    npu_src = torch.ones(numel, device="npu:0")
    npu_dst = torch.empty(numel, device="npu:0")
    cpu_src = torch.ones(numel)
    cpu_dst = torch.empty(numel)
    return {
        "npu copy_": lambda: npu_dst.copy_(npu_src),
        "npu .cpu()": npu_src.cpu,
        "npu from cpu": lambda: npu_dst.copy_(cpu_src),
        "cpu copy_": lambda: cpu_dst.copy_(cpu_src),
        "cpu .to()": lambda: cpu_src.to(torch.float64),
        "npu .item()": npu_src[0].item,
    }


def _set(state: str) -> None:
    if state == "on":
        copies.enable()
    else:
        copies.disable()


def _block(op: Callable[[], object], calls: int) -> float:
    """Median host time of one call over ``calls`` calls (seconds)."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        op()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; return per-case medians (microseconds) with the hook on and off, and their ratio."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=20, help="blocks per state (hook on, hook off), alternating")
    p.add_argument("--calls", type=int, default=200, help="calls per block")
    p.add_argument("--numel", type=int, default=256)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.blocks < 1 or args.calls < 1 or args.numel < 1:
        p.error("--blocks, --calls and --numel must be >= 1")

    cases = _cases(args.numel)
    samples: dict[str, dict[str, list[float]]] = {name: {"on": [], "off": []} for name in cases}
    with copies.disabled():  # the caller's setting is back afterwards, whatever the body switched
        _set("on")
        dispatch_key = copies.status()["dispatch_key"]
        for state in ("on", "off"):  # warm-up, both states
            _set(state)
            for op in cases.values():
                _block(op, args.calls)
        for i in range(2 * args.blocks):
            state = "on" if i % 2 == 0 else "off"
            _set(state)
            for name, op in cases.items():
                samples[name][state].append(_block(op, args.calls))
        torch.npu.synchronize()

    results: dict[str, Any] = {"blocks": args.blocks, "calls": args.calls, "dispatch_key": dispatch_key}
    for name, by_state in samples.items():
        on = statistics.median(by_state["on"]) * 1e6
        off = statistics.median(by_state["off"]) * 1e6
        results[name] = {"median_us_on": on, "median_us_off": off, "ratio_on_off": on / off}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(
            f"copy hook at {dispatch_key or '?'}: host time per call, hook on vs off "
            f"(medians of {args.blocks} blocks of {args.calls} calls each way):"
        )
        for name in cases:
            r = results[name]
            print(
                f"  {name:<14} on {r['median_us_on']:7.2f} us   off {r['median_us_off']:7.2f} us   "
                f"{r['ratio_on_off']:.2f}x"
            )
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
