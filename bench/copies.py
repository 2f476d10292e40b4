"""Host time of a cross-device ``Tensor.to()`` while device work is pending, beside a same-device copy's.

    python bench/copies.py [--iters N] [--numel N] [--pending S] [--goal X] [--json]

Run on aclsim (``import torch_npu_ipc`` activates it without CANN) with at
least two devices. Before each timed call, ``--pending`` seconds of simulated
device work are queued on both devices' current streams and the source is
written by an op queued behind that work. The host time of one call is then
measured for:

  same_device   ``x.clone()`` on npu:0 (a device copy that only enqueues work)
  events        ``x.to('npu:1')`` through the plugin's event barrier
  synchronize   the same through the plugin with ``TORCH_NPU_IPC_COPIES=sync``
                semantics (host synchronizes the streams; what older
                torch_npu does, and the fallback without IPC events)
  torch_npu     the same with the hook disabled (torch_npu 2.13's own kernel)

The ratio ``events / same_device`` is the figure of merit (goal <= 1.2).
All numbers come from one process and one run. Host times are medians.

``main(argv)`` returns the results as a dict.
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

import aclsim
from torch_npu_ipc import copies

GOAL = 1.2


def _pending_work(seconds: float) -> None:
    for dev in (0, 1):
        aclsim.sleep(torch.npu.current_stream(dev).npu_stream, seconds)


def _one(op: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, pending: float) -> tuple[float, int]:
    """Host time of one call with device work pending, and the stream synchronizes it made."""
    torch.npu.synchronize(0)
    torch.npu.synchronize(1)
    _pending_work(pending)
    x.add_(1)  # the source is written behind the pending work
    before = aclsim.counters()["aclrtSynchronizeStream"]
    t0 = time.perf_counter()
    y = op(x)
    elapsed = time.perf_counter() - t0
    syncs = aclsim.counters()["aclrtSynchronizeStream"] - before
    del y
    return elapsed, syncs


def _cross(t: torch.Tensor) -> torch.Tensor:
    return t.to("npu:1")


def _same(t: torch.Tensor) -> torch.Tensor:
    return t.clone()


# label -> (hook state: None = off, False = events, True = synchronize; the op)
CASES: dict[str, tuple[bool | None, Callable[[torch.Tensor], torch.Tensor]]] = {
    "same_device": (False, _same),
    "events": (False, _cross),
    "synchronize": (True, _cross),
    "torch_npu": (None, _cross),
}


def _set_hook(state: bool | None) -> None:
    if state is None:
        copies.disable()
    else:
        copies.enable(synchronize=state)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; return host times (microseconds), ratios and stream synchronizes per copy."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--numel", type=int, default=1 << 16)
    p.add_argument("--pending", type=float, default=0.005, help="seconds of device work pending per call")
    p.add_argument("--goal", type=float, default=GOAL)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    if torch.npu.device_count() < 2:
        raise SystemExit("needs two NPUs (aclsim: ACLSIM_DEVICES=2 or more)")
    x = torch.zeros(args.numel, dtype=torch.float32, device="npu:0")
    torch.zeros(1, device="npu:1")  # initializes npu:1's streams
    saved = copies.status()
    times: dict[str, list[float]] = {k: [] for k in CASES}
    syncs: dict[str, int] = dict.fromkeys(CASES, 0)
    try:
        for state, op in CASES.values():  # warm-up: event pools, peer access, allocator
            _set_hook(state)
            for _ in range(3):
                _one(op, x, args.pending)
        _set_hook(False)
        assert torch.equal(x.to("npu:1").cpu(), x.cpu()), "event-barrier copy returned wrong data"
        # Round-robin, so drifts in machine load hit every case alike.
        for _ in range(args.iters):
            for name, (state, op) in CASES.items():
                _set_hook(state)
                elapsed, n = _one(op, x, args.pending)
                times[name].append(elapsed)
                syncs[name] += n
    finally:
        if saved["enabled"]:
            copies.enable(synchronize=saved["mode"] == "synchronize")
        else:
            copies.disable()

    us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    results: dict[str, Any] = {
        "iters": args.iters,
        "numel": args.numel,
        "pending_s": args.pending,
        "host_us": us,
        "ratio_to_same_device": {k: v / us["same_device"] for k, v in us.items()},
        "stream_syncs_per_call": {k: v / args.iters for k, v in syncs.items()},
        "goal": args.goal,
    }
    results["goal_met"] = results["ratio_to_same_device"]["events"] <= args.goal
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"host time per call, {args.pending * 1e3:.1f} ms of device work pending, median of {args.iters}:")
        for key, label in (
            ("same_device", "same-device copy (clone)"),
            ("events", "cross-device, event barrier"),
            ("synchronize", "cross-device, synchronize"),
            ("torch_npu", "cross-device, torch_npu 2.13"),
        ):
            ratio = results["ratio_to_same_device"][key]
            n = results["stream_syncs_per_call"][key]
            print(f"  {label:30s}{us[key]:9.1f} us  {ratio:6.2f}x   stream syncs/call {n:.1f}")
        verdict = "met" if results["goal_met"] else "NOT met"
        print(f"goal events/same-device <= {args.goal:.2f}x: {verdict}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
