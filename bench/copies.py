"""Host time of a cross-device ``Tensor.to()``, beside a same-device copy's, in two regimes.

    python bench/copies.py [--iters N] [--numel N] [--pending S] [--goal X] [--json]

Run on aclsim (``import torch_npu_ipc`` activates it without CANN) with at
least two devices. The host time of one call is measured for:

  same_device   ``x.clone()`` on npu:0 (a device copy that only enqueues work)
  dst_clone     a clone of a tensor on npu:1, whose task queue is idle (the
                source was written on npu:0): the least a copy into npu:1
                costs with the task queue on, since it must allocate there
                and queue work behind npu:1's earlier work, waking that queue
  alloc_src     ``torch.empty_like`` of the source (npu:0): the allocation
                inside the same-device copy
  alloc_dst     ``torch.empty_like`` of a tensor on npu:1: the allocation
                inside the cross-device copy (torch_npu's, with its switch
                of the current device)
  events        ``x.to('npu:1')`` through the plugin's event barrier
  synchronize   the same through the plugin with ``TORCH_NPU_IPC_COPIES=sync``
                semantics (host synchronizes the streams; what older
                torch_npu does, and the fallback without IPC events)
  torch_npu     the same with the hook disabled (torch_npu 2.13's own kernel)

in two regimes, each round-robin over the cases in blocks of a few calls
(switching the hook on or off re-registers kernels with the dispatcher, which
no copy pays in use: a block starts with one untimed call after the switch):

  device busy   (the issue's figure) before each call the host synchronizes
                both devices, queues ``--pending`` seconds of simulated device
                work on both current streams and writes the source behind it
  host ahead    the device is as busy, but the host runs ahead of it as a
                training loop does: at the start of each block the host
                synchronizes and queues ``--pending`` seconds of device work
                per call of the block, then writes and copies call after call
                while that work runs (the device-busy regime times calls made
                right after the host woke from a synchronize, with cold
                caches). The cases that synchronize are left out: their first
                call would wait for the whole block's work.
  back to back  the source is written and copied at once, call after call,
                with no host synchronize in between and no pending work

The source is written just before each timed call, with nothing in between:
with torch_npu's task queue on (``TASK_QUEUE_ENABLE`` 1 or 2) the write may
still sit in the queue when the copy starts. The event barrier queues its
runtime calls behind it instead of waiting for the queue thread; its queue
threads' waits for each other are reported per copy
(``copies.status()["signal_wait_ns"]``).

The ratio ``events / same_device`` in the device-busy regime is the figure
of merit (goal <= 1.2); ``events / dst_clone`` shows what the barrier costs
beyond the allocation and queued work any copy into npu:1 pays, and
``(events - alloc_dst) / (same_device - alloc_src)`` compares the two copies
without torch_npu's allocation in each (a difference of medians: an
estimate). Beside each host time, "CPU" is the calling thread's CPU time in
the call (``time.thread_time()``): when the two agree, the caller spent the
time itself rather than waiting for a core. All numbers come from one
process and one run; host and CPU times are medians.

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
from torch_npu_ipc.bench import require_ipc_events

GOAL = 1.2
# ``python -m torch_npu_ipc.bench --quick``: a short smoke run.
QUICK_ARGS = ["--iters", "20"]
# The runner skips this benchmark where interprocess events are unsupported.
NEEDS_IPC_EVENTS = True
# Timed calls per case in a row (see _regime).
BLOCK = 5


Op = Callable[[torch.Tensor], torch.Tensor]


def _cross(t: torch.Tensor) -> torch.Tensor:
    return t.to("npu:1")


def _same(t: torch.Tensor) -> torch.Tensor:
    return t.clone()


Cases = dict[str, tuple[bool | None, Op]]


def _cases(dst: torch.Tensor) -> Cases:
    """Label -> (hook state: None = off, False = events, True = synchronize; the op).

    ``dst`` is the tensor on npu:1 that the ``dst_clone`` case copies.
    """
    return {
        "same_device": (False, _same),
        "dst_clone": (False, lambda _t: dst.clone()),
        "alloc_src": (False, torch.empty_like),
        "alloc_dst": (False, lambda _t: torch.empty_like(dst)),
        "events": (False, _cross),
        "synchronize": (True, _cross),
        "torch_npu": (None, _cross),
    }


LABELS = {
    "same_device": "same-device copy (clone)",
    "dst_clone": "clone on npu:1 (idle queue)",
    "alloc_src": "allocation on npu:0",
    "alloc_dst": "allocation on npu:1",
    "events": "cross-device, event barrier",
    "synchronize": "cross-device, synchronize",
    "torch_npu": "cross-device, torch_npu 2.13",
}


def _set_hook(state: bool | None) -> None:
    if state is None:
        copies.disable()
    else:
        copies.enable(synchronize=state)


def _one(op: Op, x: torch.Tensor, pending: float | None) -> tuple[float, float, int]:
    """Host time of one call (seconds), the calling thread's CPU time in it, and its stream synchronizes.

    With ``pending``, the devices are synchronized and given ``pending`` seconds of work first.
    """
    if pending is not None:
        _busy(pending)
    syncs = aclsim.counters()["aclrtSynchronizeStream"]
    x.add_(1)  # the source is written just before the copy
    c0 = time.thread_time()
    t0 = time.perf_counter()
    y = op(x)
    elapsed = time.perf_counter() - t0
    cpu = time.thread_time() - c0
    syncs = aclsim.counters()["aclrtSynchronizeStream"] - syncs
    del y
    return elapsed, cpu, syncs


def _busy(pending: float) -> None:
    """Synchronize both devices, then queue ``pending`` seconds of work on both current streams."""
    _synchronize()
    for dev in (0, 1):
        aclsim.sleep(torch.npu.current_stream(dev).npu_stream, pending)


def _synchronize() -> None:
    for dev in (0, 1):
        torch.npu.synchronize(dev)


def _regime(cases: Cases, x: torch.Tensor, iters: int, pending: float | None, ahead: bool = False) -> dict[str, Any]:
    """One regime's medians and ratios; ``ahead``: ``pending`` per call is queued at the start of each block."""
    per_call = None if ahead else pending
    times: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    syncs: dict[str, int] = dict.fromkeys(cases, 0)
    # Warm-up: peer access, allocator, and the event pools. Back to back, the
    # caller outruns the queue threads and up to 128 copies (two pooled IPC
    # events each) are in flight: grow the pools to that before timing, or
    # event creation (about 300 us each on hardware) lands in the timed calls.
    warm = 3 if pending is not None else 160
    for state, op in cases.values():
        _set_hook(state)
        for _ in range(warm):
            if ahead:
                _busy(pending * (BLOCK + 1))
            _one(op, x, per_call)
    _synchronize()
    before = copies.status()
    # Round-robin in short blocks, so drifts in machine load hit every case
    # alike. Switching the hook on or off re-registers kernels with the
    # dispatcher, which no copy pays in use: each block starts with one
    # untimed call after the switch.
    for start in range(0, iters, BLOCK):
        for name, (state, op) in cases.items():
            _set_hook(state)
            if ahead:
                _busy(pending * (BLOCK + 1))
            _one(op, x, per_call)
            for _ in range(min(BLOCK, iters - start)):
                elapsed, spent, n = _one(op, x, per_call)
                times[name].append(elapsed)
                cpu[name].append(spent)
                syncs[name] += n
    _synchronize()  # every queued barrier call has run
    after = copies.status()
    waited_ns = after["signal_wait_ns"] - before["signal_wait_ns"]
    n_events = after["event_copies"] - before["event_copies"]
    us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    cpu_us = {k: statistics.median(v) * 1e6 for k, v in cpu.items()}
    beyond = {"same_device": us["same_device"] - us["alloc_src"], "events": us["events"] - us["alloc_dst"]}
    return {
        "host_us": us,
        "ratio_to_same_device": {k: v / us["same_device"] for k, v in us.items()},
        "cpu_us": cpu_us,
        "cpu_ratio_to_same_device": {k: v / max(cpu_us["same_device"], 1e-3) for k, v in cpu_us.items()},
        "events_vs_dst_clone": us["events"] / us["dst_clone"],
        "events_extra_us": us["events"] - us["same_device"],
        "beyond_allocation_us": beyond,
        "events_vs_same_device_beyond_allocation": beyond["events"] / max(beyond["same_device"], 1e-3),
        "stream_syncs_per_call": {k: v / iters for k, v in syncs.items()},
        "events_signal_wait_mean_us": waited_ns / max(n_events, 1) / 1e3,
    }


def _print(title: str, r: dict[str, Any]) -> None:
    print(title)
    us = r["host_us"]
    for key, label in LABELS.items():
        if key not in us:  # not timed in this regime
            continue
        ratio = r["ratio_to_same_device"][key]
        n = r["stream_syncs_per_call"][key]
        cpu, cpu_ratio = r["cpu_us"][key], r["cpu_ratio_to_same_device"][key]
        print(
            f"  {label:30s}{us[key]:9.1f} us  {ratio:6.2f}x   CPU {cpu:8.1f} us {cpu_ratio:6.2f}x   "
            f"stream syncs/call {n:.1f}"
        )
    print(
        f"  event barrier / clone on npu:1: {r['events_vs_dst_clone']:.2f}x; "
        f"event barrier - same-device copy: {r['events_extra_us']:+.1f} us"
    )
    beyond = r["beyond_allocation_us"]
    print(
        f"  without the allocation in each: event barrier {beyond['events']:.1f} us, "
        f"same-device copy {beyond['same_device']:.1f} us, "
        f"{r['events_vs_same_device_beyond_allocation']:.2f}x (difference of medians)"
    )
    print(
        "  event barrier: queue threads waited for each other "
        f"{r['events_signal_wait_mean_us']:.1f} us per copy (mean; the caller never waits)"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; return host times (microseconds), ratios and stream synchronizes per copy."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--numel", type=int, default=1 << 16)
    p.add_argument("--pending", type=float, default=0.005, help="seconds of device work pending per call")
    p.add_argument("--goal", type=float, default=GOAL)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.iters < 1 or args.numel < 1 or args.pending <= 0 or args.goal <= 0:
        p.error("--iters and --numel must be >= 1, --pending and --goal > 0")

    if torch.npu.device_count() < 2:
        raise SystemExit("needs two NPUs (aclsim: ACLSIM_DEVICES=2 or more)")
    require_ipc_events("measures the event barrier")
    x = torch.zeros(args.numel, dtype=torch.float32, device="npu:0")
    cases = _cases(torch.zeros(args.numel, dtype=torch.float32, device="npu:1"))
    with copies.disabled():  # the caller's setting is back afterwards, whatever the body switched
        _set_hook(False)
        assert torch.equal(x.to("npu:1").cpu(), x.cpu()), "event-barrier copy returned wrong data"
        busy = _regime(cases, x, args.iters, args.pending)
        unsynchronized = {k: v for k, v in cases.items() if k not in ("synchronize", "torch_npu")}
        ahead = _regime(unsynchronized, x, args.iters, args.pending, ahead=True)
        back_to_back = _regime(cases, x, args.iters, None)

    results: dict[str, Any] = {
        "iters": args.iters,
        "numel": args.numel,
        "pending_s": args.pending,
        **busy,
        "host_ahead": ahead,
        "back_to_back": back_to_back,
        "goal": args.goal,
    }
    results["goal_met"] = results["ratio_to_same_device"]["events"] <= args.goal
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print(
            f"device busy: host time per call, {args.pending * 1e3:.1f} ms of device work pending, "
            f"median of {args.iters}:",
            busy,
        )
        _print(
            f"host ahead: {args.pending * 1e3:.1f} ms of device work per call queued at the start of each "
            f"block of {BLOCK}, no synchronize between calls, median of {args.iters}:",
            ahead,
        )
        _print(f"back to back: source written and copied at once, median of {args.iters}:", back_to_back)
        verdict = "met" if results["goal_met"] else "NOT met"
        print(f"goal events/same-device <= {args.goal:.2f}x (device busy): {verdict}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
