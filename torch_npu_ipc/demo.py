"""Interprocess events and shared tensors, end to end in three flows: ``python -m torch_npu_ipc.demo``.

(a) a two-process handshake on one device: the producer records an
    interprocess event after slow device work and sends it with a shared
    tensor; the consumer's stream waits, works on the tensor, and records the
    same event back; the producer waits for it and sees the consumer's result;
(b) one producer on device 0 and N consumers on devices 1..N (prints [SKIP]
    when there are too few devices);
(c) a pipelined tensor handoff with a progress bar and a summary.

(a) and (b) print [SKIP] with the reason on an NPU without interprocess
events; (c) then runs with a stream synchronize per send and says so.

Runs on the NPU when CANN is installed, else on aclsim. Prints [SUCCESS] or
[FAILURE] and exits 0 or 1. ``--flows b,c`` runs only those flows.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import torch
import torch.multiprocessing as mp

import torch_npu_ipc
from torch_npu_ipc.events import Event

TIMEOUT = 60.0


def _slow(seconds: float) -> None:
    """Queue `seconds` of device work on the current stream (simulated on aclsim, a busy loop on NPU)."""
    if torch_npu_ipc.RUNTIME == "aclsim":
        import aclsim

        aclsim.sleep(torch.npu.current_stream().npu_stream, seconds)
    else:
        x = torch.ones(1024, 1024, device=torch.npu.current_device())
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            x.mul_(1.0)


def _counters() -> dict[str, int]:
    if torch_npu_ipc.RUNTIME != "aclsim":
        return {}
    import aclsim

    return aclsim.counters()


def _no_events(flow: str, what: str) -> bool:
    """Print [SKIP] for ``flow`` and return True when this NPU has no interprocess events."""
    reason = torch_npu_ipc._C._ipc_event_unsupported_reason(0)
    if reason:
        print(f"  ({flow}) [SKIP] {what} needs interprocess events: {reason}")
    return bool(reason)


# ------------------------------------------------------------ (a) handshake
def _handshake_consumer(inbox: mp.Queue, outbox: mp.Queue) -> None:
    torch.npu.set_device(0)
    tensor, event = inbox.get(timeout=TIMEOUT)
    event.wait()  # this stream waits for the producer's work; the host does not block
    tensor.add_(1)  # "work"
    event.record()  # signal back through the same interprocess event
    outbox.put("recorded")
    inbox.get(timeout=TIMEOUT)  # keep the tensor alive until the producer read it


def handshake() -> bool | None:
    if _no_events("a", "the handshake"):
        return None
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    consumer = ctx.Process(target=_handshake_consumer, args=(inbox, outbox), daemon=True)
    consumer.start()
    torch.npu.set_device(0)
    data = torch.zeros(1024, device="npu:0")
    event = Event(interprocess=True)
    _slow(0.2)
    data.fill_(41)  # runs after 0.2 s of device work
    event.record()
    t0 = time.perf_counter()
    inbox.put((data, event))
    sent = time.perf_counter() - t0
    outbox.get(timeout=TIMEOUT)
    event.wait()  # our stream now waits for the consumer's add_
    value = data.cpu()[0].item()
    inbox.put("done")
    consumer.join(TIMEOUT)
    ok = value == 42 and consumer.exitcode == 0
    print(
        f"  (a) handshake on npu:0: producer sent after {sent * 1e3:.1f} ms host time, read back {value:.0f}: "
        f"{'ok' if ok else 'WRONG'}"
    )
    return ok


# ------------------------------------------------- (b) one to many devices
def _fanout_consumer(index: int, inbox: mp.Queue, outbox: mp.Queue) -> None:
    device = index + 1
    torch.npu.set_device(device)
    tensor, event = inbox.get(timeout=TIMEOUT)
    event.wait()
    local = tensor.to(f"npu:{device}")  # device-to-device copy after the wait
    outbox.put((index, float(local.cpu().sum())))


def fanout(consumers: int) -> bool | None:
    count = torch.npu.device_count()
    if count < consumers + 1:
        hint = f"run with --consumers {count - 1}" if count >= 2 else "it needs 2 NPUs or more"
        if torch_npu_ipc.RUNTIME == "aclsim":
            from aclsim._env import MAX_DEVICES

            if consumers + 1 <= MAX_DEVICES:
                hint += f", or set ACLSIM_DEVICES={consumers + 1} for more simulated devices"
        print(f"  (b) [SKIP] 1 producer -> {consumers} consumers needs {consumers + 1} devices, found {count} ({hint})")
        return None
    if _no_events("b", f"1 producer -> {consumers} consumers"):
        return None
    ctx = mp.get_context("spawn")
    outbox = ctx.Queue()
    inboxes = [ctx.Queue() for _ in range(consumers)]
    procs = [ctx.Process(target=_fanout_consumer, args=(i, inboxes[i], outbox), daemon=True) for i in range(consumers)]
    for p in procs:
        p.start()
    torch.npu.set_device(0)
    data = torch.zeros(4096, device="npu:0")
    event = Event(interprocess=True)
    _slow(0.2)
    data.fill_(2)
    event.record()
    for q in inboxes:
        q.put((data, event))
    sums = dict(outbox.get(timeout=TIMEOUT) for _ in range(consumers))
    for p in procs:
        p.join(TIMEOUT)
    ok = all(s == 2 * 4096 for s in sums.values()) and all(p.exitcode == 0 for p in procs)
    where = "1 consumer on npu:1" if consumers == 1 else f"{consumers} consumers on npu:1..{consumers}"
    print(f"  (b) 1 producer on npu:0 -> {where}: sums {sorted(sums.values())}: {'ok' if ok else 'WRONG'}")
    return ok


# ------------------------------------------------------ (c) pipelined handoff
def _pipeline_consumer(inbox: mp.Queue, outbox: mp.Queue, count: int) -> None:
    torch.npu.set_device(0)
    torch.empty(1, device="npu:0")  # the device's context and streams exist before the first tensor
    outbox.put("ready")
    total = 0.0
    for _ in range(count):
        i, t = inbox.get(timeout=TIMEOUT)
        total += float(t[0].cpu()) - i  # every tensor must hold its own index + 1
        del t
    outbox.put((total, _counters()))


def pipeline(count: int, work_ms: float) -> bool:
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(maxsize=64), ctx.Queue()
    consumer = ctx.Process(target=_pipeline_consumer, args=(inbox, outbox, count), daemon=True)
    consumer.start()
    torch.npu.set_device(0)
    torch.empty(1, device="npu:0")
    # Starting a Python process that imports torch and torch_npu takes seconds: that is not the
    # handoff's throughput, so the clock starts once the consumer is ready to receive.
    t0 = time.perf_counter()
    if outbox.get(timeout=TIMEOUT * 2) != "ready":
        raise RuntimeError("the pipeline consumer did not start")
    startup = time.perf_counter() - t0
    before = _counters()
    blocked = 0.0
    # Redraw the bar in place on a terminal; in a log, print it at every quarter only.
    on_terminal = sys.stdout.isatty()
    steps = 40 if on_terminal else 4
    start = time.perf_counter()
    for i in range(count):
        t = torch.empty(256, device="npu:0")
        _slow(work_ms / 1e3)
        t.fill_(i + 1)
        t0 = time.perf_counter()
        inbox.put((i, t))
        blocked += time.perf_counter() - t0
        if (i + 1) % max(1, count // steps) == 0 or i + 1 == count:
            done = (i + 1) * 40 // count
            bar = f"  (c) [{'#' * done}{'.' * (40 - done)}] {i + 1}/{count}"
            if on_terminal:
                print(f"\r{bar}", end="", flush=True)
            else:
                print(bar, flush=True)
    total, consumer_counts = outbox.get(timeout=TIMEOUT * 2)
    elapsed = time.perf_counter() - start
    consumer.join(TIMEOUT)
    after = _counters()
    if on_terminal:
        print()  # end the bar's line
    ok = total == count and consumer.exitcode == 0
    stats = torch_npu_ipc.sharing_stats()
    syncs = after.get("aclrtSynchronizeStream", 0) - before.get("aclrtSynchronizeStream", 0)
    events = after.get("ipc_event_create", 0) - before.get("ipc_event_create", 0)
    waits = consumer_counts.get("aclrtStreamWaitEvent", 0)
    print(
        f"      {count} tensors in {elapsed:.2f} s = {count / elapsed:.0f} tensors/s "
        f"(device-bound limit {1e3 / work_ms:.0f}/s); producer host time in send: {blocked * 1e3:.1f} ms total "
        f"(consumer process start-up, {startup:.2f} s, not counted)"
    )
    if after:
        print(
            f"      IPC events created: {events} (pooled, reused); consumer stream waits: {waits}; "
            f"producer stream synchronizes: {syncs} (synchronizes avoided: {count - stats['fallback_syncs']})"
        )
    print(f"      every tensor arrived with its final value: {'ok' if ok else 'WRONG'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_npu_ipc.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=3, help="consumers in flow (b) (default 3)")
    parser.add_argument("--tensors", type=int, default=200, help="tensors in flow (c) (default 200)")
    parser.add_argument("--work-ms", type=float, default=1.0, help="device work per tensor in flow (c)")
    parser.add_argument("--flows", default="a,b,c", help="the flows to run, comma-separated (default a,b,c)")
    args = parser.parse_args(argv)
    if args.consumers < 1 or args.tensors < 1 or not 0 < args.work_ms <= 10_000:  # also refuses nan and inf
        parser.error("--consumers and --tensors must be >= 1, --work-ms a number of milliseconds > 0 and <= 10000")
    flows = [f.strip() for f in args.flows.split(",")]
    if not flows or any(f not in ("a", "b", "c") for f in flows):
        parser.error(f"--flows takes a comma-separated choice of a, b and c, e.g. --flows b,c; got {args.flows!r}")
    print(
        f"torch_npu_ipc {torch_npu_ipc.__version__} on {torch_npu_ipc.RUNTIME} "
        f"({torch.npu.device_count()} device(s)), torch {torch.__version__}"
    )
    results = []
    for letter, name, flow in (
        ("a", "handshake", handshake),
        ("b", "fanout", lambda: fanout(args.consumers)),
        ("c", "pipeline", lambda: pipeline(args.tensors, args.work_ms)),
    ):
        if letter not in flows:
            continue
        try:
            results.append(flow())
        except Exception:  # a demo reports every failure and goes on
            traceback.print_exc()
            print(f"  {name}: FAILED")
            results.append(False)
    ok = all(r is not False for r in results)
    print("[SUCCESS]" if ok else "[FAILURE]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
