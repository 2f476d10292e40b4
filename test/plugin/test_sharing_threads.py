"""Tensors shared between two processes by several threads on each side keep every value (issue 4).

The producer runs three sender threads (one per stream, on npu:0 and npu:1)
and a collector thread calling ``ipc_collect()``; the consumer runs three
receiver threads taking from one queue. Nothing orders the threads of a
process with each other: they race on the plugin's reference tables, its
limbo list, its cache of exported segment keys (on the producer), and on
its cache of imported segments, its releaser and its event cache (on the
consumer). Each sender, per step:

- makes a tensor on its stream (1 to 300,000 elements, so both allocator
  pools) and writes it behind 0-2 ms of device work, with values unique
  to the tensor;
- sends it, or a view of its second half, as ``export_tensor`` bytes or
  through the queue (after ordering its stream onto the default stream,
  which the queue's feeder thread records on), and drops it (the block
  goes to limbo until the receiver releases it) or keeps it for a while;
- or sends a view of one tensor that every sender shares, so that several
  threads take slots of the same block at once and receivers import the
  same segment at once;
- or churns: allocates and frees tensors of every size on its stream,
  filled with -7, which lands in any block its stream freed too early.

Each receiver imports on the tensor's device or maps it on the other one
(sometimes from three threads at once: one import succeeds, the others
raise), and then reads it at once; or reads it behind device work and drops it
before the read ran (the releaser must hold the slot until it ran); or
reads it on a second stream (``record_stream``); or keeps it for a while.
Every value read must be the one sent. At the end, the producer's slots
and limbo list must empty. The steps are drawn from fixed seeds; ``--soak``
runs ten times as many.
"""

from __future__ import annotations

import functools
import queue
import random
import threading
import time
from typing import Any

import pytest
import torch
from helpers import run_threads, soak
from plugin_util import synchronize_devices
from sharing_util import Scenario, get, settle

import aclsim
import torch_npu_ipc

pytestmark = pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)")

SENDERS = 3
RECEIVERS = 3
SIZES = (1, 1000, 65536, 300_000)  # elements: small-pool and large-pool blocks
COMMON = 8192  # elements of the tensor every sender shares views of
WORK = 0.002  # seconds of device work at most, before most writes and reads
LONG_WORK = 0.03  # before one in ten: longer than a message takes to arrive


def work(rng: random.Random) -> float:
    """Seconds of device work to queue before a write or a read."""
    return LONG_WORK if rng.random() < 0.1 else WORK * rng.random()


def values(tag: int, size: int) -> torch.Tensor:
    """The values of tensor ``tag``: distinct per element and per tensor, exact in float32."""
    return (torch.arange(size, dtype=torch.float32) % 2048) + float(tag * 2048)


# ------------------------------------------------------------------------------------ producer
def _sender(k: int, steps: int, out: Any, common: torch.Tensor) -> None:
    rng = random.Random(1000 + k)
    device = k % 2
    torch.npu.set_device(device)
    s = torch.npu.Stream(device=device)
    kept: list[torch.Tensor] = []
    with torch.npu.stream(s):
        for i in range(steps):
            tag = 1 + k * steps + i
            what = rng.random()
            if what < 0.15:  # a view of the tensor every sender shares: slots of one block from every thread
                offset = rng.randrange(COMMON)
                out.put(("bytes", -1, offset, COMMON, 0, torch_npu_ipc.export_tensor(common[offset:])))
                continue
            if what < 0.25:
                garbage = [torch.full((n,), -7.0, device=f"npu:{device}") for n in SIZES for _ in range(2)]
                del garbage
                continue
            size = rng.choice(SIZES)
            t = torch.zeros(size, device=f"npu:{device}")
            v = values(tag, size).to(t.device)
            aclsim.sleep(s.npu_stream, work(rng))
            t.add_(v)
            offset = size // 2 if rng.random() < 0.3 else 0
            view = t[offset:]
            if rng.random() < 0.5:
                out.put(("bytes", tag, offset, size, k, torch_npu_ipc.export_tensor(view)))
            else:
                torch.npu.default_stream(device).wait_stream(s)  # the feeder thread records on the default stream
                out.put(("queue", tag, offset, size, k, view))
            del view, v
            if rng.random() < 0.3:
                kept.append(t)  # dropped a few steps later, maybe while the receiver still reads it
            del t
            while kept and rng.random() < 0.4:
                kept.pop(rng.randrange(len(kept)))
    kept.clear()


def _senders(steps: int, out: Any, common: torch.Tensor, stop: threading.Event) -> None:
    """Every sender's steps, in threads of their own; then stops the collector."""
    try:
        run_threads([functools.partial(_sender, k, steps, out, common) for k in range(SENDERS)])
    finally:
        stop.set()


def _collector(stop: threading.Event) -> None:
    while not stop.is_set():
        torch_npu_ipc.ipc_collect()
        torch_npu_ipc.sharing_stats()
        time.sleep(0.001)


def _producer(out: Any, back: Any, steps: int) -> None:
    synchronize_devices()
    common = torch.zeros(COMMON, device="npu:0")
    common.add_(values(0, COMMON).to(common.device))
    torch.npu.synchronize(0)
    stop = threading.Event()
    try:
        run_threads([functools.partial(_senders, steps, out, common, stop), lambda: _collector(stop)])
    finally:
        for _ in range(RECEIVERS):
            out.put(("stop",))
    report = get(back)
    assert report[0] == "received", report
    del common
    st = settle()
    out.put(("exit",))
    assert st["live_slots"] == 0 and st["limbo_blocks"] == 0, f"after every receiver dropped everything: {st}"
    assert st["fallback_syncs"] == 0, f"fell back to synchronizing: {st}"


# ------------------------------------------------------------------------------------ consumer
def _check(got: torch.Tensor, msg: tuple[Any, ...], how: str) -> None:
    _, tag, offset, size, _, _ = msg
    got = got.cpu()
    want = values(0, COMMON)[offset:] if tag == -1 else values(tag, size)[offset:]
    if not torch.equal(got, want):
        i = int((got != want).nonzero()[0])
        raise AssertionError(f"{how}, tensor {tag} from offset {offset}: element {i} is {got[i]}, want {want[i]}")


def _check_later(stream: torch.npu.Stream, copy: torch.Tensor, msg: tuple[Any, ...], how: str) -> None:
    """Check a copy made on ``stream`` (which the current stream does not wait for) once it ran."""
    stream.synchronize()
    _check(copy, msg, how)


def _import_racing(data: bytes, device: int, streams: list[tuple[torch.npu.Stream, torch.npu.Stream]]) -> torch.Tensor:
    """Three threads import the same descriptor at once: one gets the tensor, the others a clear error."""
    start = threading.Barrier(3)
    got: list[torch.Tensor] = []
    refused: list[str] = []

    def racer() -> None:
        with torch.npu.stream(streams[device][0]):  # the caller's stream of that device waits for the producer
            start.wait()
            try:
                got.append(torch_npu_ipc.import_tensor(data, device=device))
            except RuntimeError as e:
                refused.append(str(e))

    run_threads([racer] * 3)
    assert len(got) == 1 and len(refused) == 2, f"{len(got)} imports succeeded, refused: {refused}"
    assert all("received already" in e for e in refused), refused
    return got[0]


def _receiver(r: int, inbox: Any, counts: list[int]) -> None:
    rng = random.Random(2000 + r)
    streams = [(torch.npu.Stream(device=d), torch.npu.Stream(device=d)) for d in range(2)]
    kept: list[torch.Tensor] = []
    later: list[tuple[torch.npu.Stream, torch.Tensor, tuple[Any, ...], str]] = []  # reads launched, checked later
    with torch.npu.stream(streams[0][0]), torch.npu.stream(streams[1][0]):
        while (msg := inbox.get(timeout=60))[0] != "stop":
            if msg[0] == "bytes" and rng.random() < 0.1:
                y = _import_racing(msg[5], rng.choice((0, 1)), streams)
            elif msg[0] == "bytes":
                device = rng.choice((None, 0, 1))  # None: the tensor's own device; else maybe mapped on the other
                y = torch_npu_ipc.import_tensor(msg[5], device=device)
            else:
                y = msg[5]
            main, side = streams[y.device.index]
            how = rng.choice(("read", "late", "side", "keep"))
            if how in ("read", "keep"):
                _check(y, msg, f"receiver {r} ({how})")
                if how == "keep":
                    kept.append(y)
            elif how == "late":  # the read runs after the drop: the slot must wait for it
                aclsim.sleep(main.npu_stream, work(rng))
                later.append((main, y * 1, msg, f"receiver {r} (late)"))
            else:
                side.wait_stream(main)
                with torch.npu.stream(side):
                    aclsim.sleep(side.npu_stream, work(rng))
                    later.append((side, y * 1, msg, f"receiver {r} (side stream)"))
                y.record_stream(side)
            del y, msg
            while kept and rng.random() < 0.4:
                kept.pop(rng.randrange(len(kept)))
            if len(later) > 4:
                _check_later(*later.pop(0))
            counts[r] += 1
    for item in later:
        _check_later(*item)


def _consumer(inbox: Any, back: Any) -> None:
    synchronize_devices()
    counts = [0] * RECEIVERS
    run_threads([lambda r=r: _receiver(r, inbox, counts) for r in range(RECEIVERS)])
    back.put(("received", sum(counts), counts))
    while True:  # stay alive until the producer settled: its slots are freed by this process's releaser
        try:
            if inbox.get(timeout=1)[0] == "exit":
                return
        except queue.Empty:
            pass


def _run(steps: int, timeout: float) -> None:
    s = Scenario()
    q, back = s.queue(), s.queue()
    s.start("consumer", _consumer, q, back)
    s.start("producer", _producer, q, back, steps)
    s.finish(timeout=timeout)


def test_threads_share_tensors_between_processes() -> None:
    """Three sender threads and a collector against three receiver threads: every value read is the one sent."""
    _run(1000 if soak() else 100, timeout=900 if soak() else 180)
