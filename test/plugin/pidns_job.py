"""One sharing job, run as pid 1 of a fresh pid namespace by ``test_pid_namespaces.py``.

    python pidns_job.py TAG RENDEZVOUS_DIR ROUNDS

The producer (this process) and a spawned consumer pass NPU tensors and
interprocess events both ways. Between a warm-up round and the timed rounds
it meets the other job through files in RENDEZVOUS_DIR, so both jobs run at
once with the same pids, sharing /dev/shm and the network namespace (where
aclsim's brokers bind abstract Unix sockets). While both are up it writes the
broker socket names and the plugin's shared-memory table names it sees to
``RENDEZVOUS_DIR/TAG.json``. Exits 0 when every value read was right.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch_npu_ipc

# isort: split
import torch
import torch.multiprocessing as mp

TIMEOUT = 120.0


def _consumer(inbox: Any, outbox: Any, rounds: int) -> None:
    for _ in range(rounds):
        x, i = inbox.get(timeout=TIMEOUT)  # waits on the producer's IPC event, on this stream
        y = x * 2  # queued behind that wait
        done = torch_npu_ipc.Event(interprocess=True)
        done.record()
        outbox.put((y, done, i))  # y is now exported by this process's broker
        del x
    assert inbox.get(timeout=TIMEOUT) is None  # the producer let go of every y: exiting loses nothing


def _rendezvous(where: Path, tag: str, step: str, timeout: float = TIMEOUT) -> None:
    (where / f"{step}-{tag}").touch()
    deadline = time.monotonic() + timeout
    while len(list(where.glob(f"{step}-*"))) < 2:
        if time.monotonic() > deadline:
            raise SystemExit(f"{tag}: the other job never reached {step!r}")
        time.sleep(0.05)


def _names() -> dict[str, list[str]]:
    with open("/proc/net/unix") as f:
        brokers = sorted({line.split()[-1] for line in f if "@aclsim-broker-" in line})
    tables = sorted(p.name for p in Path("/dev/shm").glob("torch_npu_ipc.*"))
    return {"brokers": brokers, "tables": tables}


def main(tag: str, where: Path, rounds: int) -> None:
    inbox, outbox = mp.get_context("spawn").Queue(), mp.get_context("spawn").Queue()
    consumer = mp.get_context("spawn").Process(target=_consumer, args=(inbox, outbox, rounds + 1))
    consumer.start()

    def one(i: int) -> None:
        x = torch.full((4096,), float(i), device="npu:0")
        inbox.put((x, i))
        y, done, j = outbox.get(timeout=TIMEOUT)
        assert j == i, (j, i)
        done.wait()  # this stream waits for the consumer's multiply
        got = (y + 0).cpu()
        assert torch.equal(got, torch.full((4096,), 2.0 * i)), f"{tag}: round {i} read {got[:4].tolist()}"

    one(0)  # both brokers are bound and a table is open from here on
    _rendezvous(where, tag, "up")
    report: dict[str, Any] = {"pid": os.getpid(), "pidns": os.readlink("/proc/self/ns/pid"), **_names()}
    (where / f"{tag}.json").write_text(json.dumps(report))
    _rendezvous(where, tag, "listed")
    for i in range(1, rounds + 1):
        one(i)
    inbox.put(None)
    consumer.join(TIMEOUT)
    assert consumer.exitcode == 0, f"{tag}: consumer exit code {consumer.exitcode}"
    print(f"{tag}: {rounds + 1} rounds ok as pid {os.getpid()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
