"""Event-synchronized NPU tensor sharing between real spawned processes on aclsim (issue 4).

Round trips of many shapes, dtypes and views through every transport
(Process arguments, Queue, Pipe, ``reduce_tensor``, ``export_tensor`` bytes,
a restricted unpickler), storages, ordering without host synchronization
(counters), the cache-hit race PyTorch has, peer-device import, forwarding a
received tensor to a third process, and one-shot descriptors.

The stress, budget, peer-death and fuzz scenarios live in
``test_plugin_sharing_stress.py`` and ``test_plugin_sharing_fuzz.py``.
"""

from __future__ import annotations

import atexit
import io
import os
import pickle
import time
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import pytest
import torch
import torch.multiprocessing.reductions as torch_reductions
from plugin_util import HOST_SYNCS
from sharing_util import CTX, Scenario, delta, get, settle, spawn_reporting

import aclsim
import torch_npu_ipc
from torch_npu_ipc import sharing

pytestmark = pytest.mark.skipif(not aclsim.is_active(), reason="aclsim is not active (real CANN installed)")

# Simulated device work behind the writes a receiver must wait for.
WORK = 0.5
TIMEOUT_S = 230


# ------------------------------------------------------------------------------------------ cases
def _base(dtype: torch.dtype, n: int) -> torch.Tensor:
    """Deterministic CPU values of ``dtype`` (both sides build them)."""
    a = torch.arange(n, dtype=torch.float64)
    if dtype == torch.bool:
        return (torch.arange(n) % 3) == 0
    if dtype.is_complex:
        return torch.complex(a, -a).to(dtype)
    if dtype.itemsize == 1 or not dtype.is_signed:  # int8, uint8, float8, wider unsigned
        return (torch.arange(n) % 100).to(dtype)
    return (a % 1000 - 7).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The bytes of ``t``'s elements in order: compares every dtype (float8, complex32 have no ``equal``)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def cases() -> list[tuple[str, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]]:
    """(name, CPU base, view) triples: the producer shares ``view(base.to(npu))``, the receiver compares."""
    out: list[tuple[str, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]] = []
    for dt in (dt for dt in sharing._DTYPES if dt is not None):
        out.append((f"dtype-{dt}".replace("torch.", ""), _base(dt, 37), lambda t: t))
    f = _base(torch.float32, 4 * 5 * 6)
    out += [
        ("1d", f, lambda t: t),
        ("3d", f, lambda t: t.view(4, 5, 6)),
        ("offset-slice", f, lambda t: t[7:50]),
        ("strided", f, lambda t: t[3::4]),
        ("transposed", f, lambda t: t.view(12, 10).t()),
        ("permuted", f, lambda t: t.view(4, 5, 6).permute(2, 0, 1)),
        ("narrow-noncontig", f, lambda t: t.view(4, 5, 6)[:, 1:4, ::2]),
        ("row-select", f, lambda t: t.view(12, 10)[5]),
        ("column-select", f, lambda t: t.view(12, 10)[:, 3]),
        ("scalar-0d", f, lambda t: t[17]),
        ("expand-stride0", f, lambda t: t[9:10].expand(8, 4)),
        ("as-strided-overlap", f, lambda t: t.as_strided((5, 4), (2, 1), 11)),
        ("size0-view-of-storage", f, lambda t: t[5:5]),
        ("size0-middle-dim", f, lambda t: t.view(4, 5, 6)[:, 2:2, :]),
        ("size0-storage-strided", torch.empty(4, 0), lambda t: t.t()),
        ("size0-storage-offset", torch.empty(0, 4), lambda t: t[:, 2:]),
        # Lazy views: the bits are not in the memory, the descriptor carries them.
        ("neg-view", f, lambda t: torch._neg_view(t[3:20])),
        ("conj-view", _base(torch.complex64, 12), lambda t: t.conj()[2:]),
        ("neg-conj-view", _base(torch.complex64, 12), lambda t: torch._neg_view(t.conj())),
        ("empty-storage", torch.empty(0), lambda t: t),
        ("empty-3x0x2", torch.empty(3, 0, 2), lambda t: t),
        ("int64-transposed", _base(torch.int64, 30), lambda t: t.view(5, 6).t()[1:, ::2]),
        ("bf16-offset", _base(torch.bfloat16, 64), lambda t: t[33:].view(-1, 31).t()),
        ("large-1MiB", _base(torch.float32, 1 << 18), lambda t: t[1000:]),
        ("requires-grad-leaf", _base(torch.float32, 10), lambda t: t),
    ]
    return out


def make_npu(base: torch.Tensor, view: Callable[[torch.Tensor], torch.Tensor], device: int = 0) -> torch.Tensor:
    """The producer's tensor of a case."""
    return view(base.to(f"npu:{device}"))


def read_back(t: torch.Tensor) -> torch.Tensor:
    """CPU tensor with ``t``'s exact layout, read through its storage's bytes (no NPU kernel involved)."""
    st = t.untyped_storage()
    raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st, 0, (st.nbytes(),), (1,)).cpu()
    return torch.empty(0, dtype=t.dtype).set_(raw.untyped_storage(), t.storage_offset(), t.size(), t.stride())


def meta(t: torch.Tensor) -> tuple[Any, ...]:
    """What a round trip must preserve besides the values."""
    return (
        tuple(t.shape),
        tuple(t.stride()),
        t.storage_offset(),
        t.dtype,
        t.requires_grad,
        t.untyped_storage().nbytes(),
        t.is_conj(),
        t.is_neg(),
    )


def _resolved(t: torch.Tensor) -> torch.Tensor:
    return t.resolve_conj().resolve_neg()


def check_case(name: str, got: torch.Tensor, sent_meta: tuple[Any, ...], how: str) -> None:
    """Compare a received tensor with the case's expected values and the sender's layout."""
    by_name = {n: (b, v) for n, b, v in cases()}
    base, view = by_name[name]
    expect = view(base)
    assert got.device.type == "npu", f"{how}/{name}: on {got.device}"
    assert meta(got) == sent_meta, f"{how}/{name}: layout {meta(got)} != sent {sent_meta}"
    back = read_back(got).detach()  # the memory; the lazy bits are the tensor's, set on the copy too
    torch._C._set_conj(back, got.is_conj())
    torch._C._set_neg(back, got.is_neg())
    assert torch.equal(_bits(_resolved(back)), _bits(_resolved(expect))), f"{how}/{name}: values differ"


# ------------------------------------------------------------------------------ round trips
def _round_trip_consumer(arg_tensors: dict[str, torch.Tensor], arg_meta: dict[str, Any], q: Any, conn: Any) -> None:
    for name, t in arg_tensors.items():
        check_case(name, t, arg_meta[name], "process-args")
    while (msg := get(q)) is not None:
        how, name, payload, sent_meta = msg
        if how == "queue":
            t = payload
        elif how == "pipe":
            assert conn.poll(60)
            t = conn.recv()
        elif how == "reduce_tensor":
            fn, args = payload
            t = getattr(torch_npu_ipc.sharing, fn)(*args)
        elif how == "bytes":
            t = torch_npu_ipc.import_tensor(payload)
        elif how == "restricted-unpickler":
            t = _SafeUnpickler(io.BytesIO(payload)).load()
        elif how == "parameter":
            t = payload
            assert type(t) is torch.nn.Parameter, f"a Parameter arrived as {type(t).__name__}"
            module = get(q)
            assert type(module.weight) is torch.nn.Parameter and module.weight.requires_grad
            assert type(module.bias) is torch.nn.Parameter and not module.bias.requires_grad
            assert torch.equal(module.weight.detach().cpu(), torch.arange(12.0).view(3, 4))
        elif how in ("storage-queue", "storage-bytes"):
            st = payload if how == "storage-queue" else torch_npu_ipc.import_tensor(payload).untyped_storage()
            assert isinstance(st, torch.UntypedStorage) and st.device.type == "npu", type(st)
            base, view = {n: (b, v) for n, b, v in cases()}[name]
            expect = view(base)
            n = st.nbytes() // expect.element_size()
            t = torch.empty(0, dtype=expect.dtype, device=st.device).set_(st, 0, (n,))
            assert torch.equal(read_back(t), base.reshape(-1)), f"{how}/{name}: storage values differ"
            continue
        else:
            raise AssertionError(how)
        check_case(name, t, sent_meta, how)
        if sent_meta[4]:
            assert t.is_leaf, f"{how}/{name}: a received leaf is not a leaf"
    conn.send("done")


class _SafeUnpickler(pickle.Unpickler):
    """A restricted unpickler: torch's CPU rebuild helpers are not needed, only the plugin's safe_globals()."""

    def find_class(self, module: str, name: str) -> Any:
        for fn in torch_npu_ipc.safe_globals():
            if (fn.__module__, fn.__name__) == (module, name):
                return fn
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed")


def _round_trip_producer(results: Any) -> None:
    assert torch_reductions.reduce_tensor._torch_npu_ipc  # registered on import
    keep = []
    arg_tensors: dict[str, torch.Tensor] = {}
    arg_meta: dict[str, Any] = {}
    for name, base, view in cases()[:8]:
        t = make_npu(base, view)
        keep.append(t)
        arg_tensors[name] = t
        arg_meta[name] = meta(t)
    q = CTX.Queue()
    mine, theirs = CTX.Pipe()
    consumer = spawn_reporting(results, "consumer", _round_trip_consumer, arg_tensors, arg_meta, q, theirs)

    all_cases = [(n, make_npu(b, v)) for n, b, v in cases()]
    grad_leaf = all_cases[-1][1].requires_grad_()
    with pytest.raises(RuntimeError, match="non-leaf"):
        ForkingPickler.dumps(grad_leaf * 2)
    with pytest.raises(RuntimeError, match="non-leaf"):
        torch_npu_ipc.export_tensor(grad_leaf * 2)
    for name, t in all_cases:
        keep.append(t)
        m = meta(t)
        q.put(("queue", name, t, m))
        q.put(("pipe", name, None, m))
        mine.send(t)
        fn, args = torch_reductions.reduce_tensor(t)
        assert fn is sharing.rebuild_npu_tensor
        q.put(("reduce_tensor", name, (fn.__name__, args), m))
        q.put(("bytes", name, torch_npu_ipc.export_tensor(t), m))
        q.put(("restricted-unpickler", name, bytes(ForkingPickler.dumps(t)), m))
    for name, requires_grad in (("dtype-float32", False), ("requires-grad-leaf", True), ("dtype-int64", False)):
        base, view = {n: (b, v) for n, b, v in cases()}[name]
        param = torch.nn.Parameter(make_npu(base, view), requires_grad=requires_grad)
        keep.append(param)
        q.put(("parameter", name, param, meta(param)))
        module = torch.nn.Linear(4, 3).to("npu:0")
        with torch.no_grad():
            module.weight.copy_(torch.arange(12.0).view(3, 4))
        module.bias.requires_grad_(False)
        keep.append(module)
        q.put(module)
    for name, base, view in cases()[:3] + cases()[-6:-4]:
        t = make_npu(base, view)
        keep.append(t)
        q.put(("storage-queue", name, t.untyped_storage(), None))
        whole = torch.empty(0, dtype=torch.uint8, device="npu:0").set_(t.untyped_storage())
        q.put(("storage-bytes", name, torch_npu_ipc.export_tensor(whole), None))
    q.put(None)
    assert mine.poll(TIMEOUT_S), "consumer did not finish"
    assert mine.recv() == "done"
    consumer.join(30)
    del keep


def test_round_trips_every_transport() -> None:
    """Every case through Process args, Queue, Pipe, reduce_tensor, export bytes, a restricted unpickler."""
    s = Scenario()
    s.also_expect("consumer")
    s.start("producer", _round_trip_producer, s.results)
    s.finish(timeout=240)


# ------------------------------------------------------------------- ordering and counters
def _ordering_consumer(q: Any, back: Any) -> None:
    for dev in (0, 1):  # create both devices' contexts and streams before counting
        torch.empty(1, device=f"npu:{dev}")
    stream0 = torch.npu.current_stream(0)
    # 1. A tensor written behind slow device work, sent at once: the receiver reads the final values.
    c0 = aclsim.counters()
    t0 = time.monotonic()
    x = get(q)
    took = time.monotonic() - t0
    stream0.npu_stream  # noqa: B018 - flush torch_npu's task queue so the counters are complete
    d = delta(c0, aclsim.counters())
    assert d.get("aclrtStreamWaitEvent", 0) >= 1, f"no stream wait on receive: {d}"
    assert not any(d.get(k) for k in HOST_SYNCS), f"the receiver blocked the host: {d}"
    assert d.get("ipc_mem_import") == 1, d
    assert torch.equal(x.cpu(), torch.full((4096,), 7.0)), "read before the producer's write finished"
    back.put(("first", took))

    # 2. Same storage again after another slow write: cached import, but the NEW event is waited on.
    c1 = aclsim.counters()
    y = get(q)
    stream0.npu_stream  # noqa: B018
    d = delta(c1, aclsim.counters())
    assert d.get("ipc_mem_import", 0) == 0, f"the block was imported again instead of from the cache: {d}"
    assert d.get("aclrtStreamWaitEvent", 0) >= 1, f"no wait on the second send's event (cache hit race): {d}"
    assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert torch.equal(y.cpu(), torch.full((4096,), 8.0)), "cache hit skipped the new event: stale values"
    assert torch.equal(x.cpu(), torch.full((4096,), 8.0))
    back.put(("second", None))

    # 3. Peer import: map the producer's npu:0 memory on npu:1, behind slow work again.
    data = get(q)
    c2 = aclsim.counters()
    z = torch_npu_ipc.import_tensor(data, device=1)
    torch.npu.current_stream(1).npu_stream  # noqa: B018
    d = delta(c2, aclsim.counters())
    assert z.device == torch.device("npu:1"), z.device
    assert d.get("aclrtStreamWaitEvent", 0) >= 1 and not any(d.get(k) for k in HOST_SYNCS), d
    assert torch.equal(z.cpu(), torch.full((4096,), 9.0)), "peer import read stale values"
    assert torch.equal((z + 1).cpu(), torch.full((4096,), 10.0)), "computing on the peer mapping failed"

    # 4. A descriptor is good for one receiver.
    with pytest.raises(RuntimeError, match="received already"):
        torch_npu_ipc.import_tensor(data, device=1)
    del x, y, z
    back.put(("done", None))


def _ordering_producer(results: Any) -> None:
    q, back = CTX.Queue(), CTX.Queue()
    consumer = spawn_reporting(results, "consumer", _ordering_consumer, q, back)
    x = torch.zeros(4096, device="npu:0")
    stream = torch.npu.current_stream()
    stream.synchronize()
    c0 = aclsim.counters()

    aclsim.sleep(stream.npu_stream, WORK)
    x.fill_(7.0)
    t0 = time.monotonic()
    q.put(x)
    tag, _ = get(back)
    assert tag == "first"
    # The consumer read the values and answered; the producer's host never waited for its device.
    d = delta(c0, aclsim.counters())
    assert d.get("aclrtSynchronizeStream", 0) == 0, f"the producer synchronized its stream: {d}"
    assert d.get("ipc_event_get_handle", 0) >= 1 and d.get("aclrtRecordEvent", 0) >= 1, d
    assert time.monotonic() - t0 >= WORK * 0.9, "the consumer answered before the device work could have run"

    aclsim.sleep(stream.npu_stream, WORK)
    x.fill_(8.0)
    q.put(x)
    assert get(back)[0] == "second"

    aclsim.sleep(stream.npu_stream, WORK)
    x.add_(1.0)
    q.put(torch_npu_ipc.export_tensor(x))
    assert get(back)[0] == "done"
    d = delta(c0, aclsim.counters())
    assert not any(d.get(k) for k in HOST_SYNCS), f"the producer blocked the host: {d}"
    assert d.get("ipc_mem_export") == 1, f"the block's key was not cached: {d}"
    consumer.join(30)
    # The receiver dropped everything: its releaser thread frees its slots soon after.
    deadline = time.monotonic() + 30
    while torch_npu_ipc.sharing_stats()["live_slots"] and time.monotonic() < deadline:
        torch_npu_ipc.ipc_collect()  # also forgets a receiver that exited before its releases ran
        time.sleep(0.05)
    st = torch_npu_ipc.sharing_stats()
    assert st["live_slots"] == 0 and st["fallback_syncs"] == 0, st


@pytest.mark.devices(2)
def test_ordering_counters_cache_hit_and_peer() -> None:
    """Slow writes are seen by the receiver with no host sync; cache hits wait too; peer import works."""
    s = Scenario()
    s.also_expect("consumer")
    s.start("producer", _ordering_producer, s.results)
    s.finish()


# ------------------------------------------------------------------------------- forwarding
N_FWD = 1 << 16


def _fwd_middle(q: Any, out: Any, back: Any, exit_handlers: bool = True) -> None:
    """Receive on npu:1 (peer mapping of the producer's npu:0), write behind slow work, forward at once.

    Without ``exit_handlers`` its exit neither waits for its forwards nor withdraws them, as when it is killed.
    """
    t = torch_npu_ipc.import_tensor(get(q), device=1)
    assert t.device == torch.device("npu:1"), t.device
    assert torch.equal(t.cpu(), torch.full((N_FWD,), 3.0))
    aclsim.sleep(torch.npu.current_stream(1).npu_stream, WORK)
    t.add_(2.0)
    c0 = aclsim.counters()
    out.put(tuple(torch_npu_ipc.export_tensor(x) for x in (t, t[N_FWD // 2 :], t[:4])))
    d = delta(c0, aclsim.counters())
    assert not any(d.get(k) for k in HOST_SYNCS), f"forwarding blocked the host: {d}"
    assert d.get("ipc_mem_export", 0) == 0, f"the forwarder exported its mapping instead of the original: {d}"
    back.put("forwarded")
    assert get(q) == "exit"
    del t
    if not exit_handlers:
        atexit.unregister(sharing._warn_if_shared_tensors_alive)


def _fwd_last(q: Any, back: Any) -> None:
    """Receive the forwarded tensor and a view on npu:2 and hold them past the forwarder's exit."""
    a, b, c = get(q)
    t, view = torch_npu_ipc.import_tensor(a, device=2), torch_npu_ipc.import_tensor(b, device=2)
    # Without device=, a forwarded tensor arrives where the forwarder held it, not on the memory's device.
    default = torch_npu_ipc.import_tensor(c)
    assert default.device == torch.device("npu:1"), default.device
    assert torch.equal(default.cpu(), torch.full((4,), 5.0))
    del default
    assert t.device == torch.device("npu:2"), t.device
    assert torch.equal(t.cpu(), torch.full((N_FWD,), 5.0)), "did not wait for the forwarder's write"
    assert torch.equal(view.cpu(), torch.full((N_FWD // 2,), 5.0))
    assert view.storage_offset() == N_FWD // 2 and view.stride() == (1,), (view.storage_offset(), view.stride())
    back.put("holding")
    assert get(q) == "forwarder-gone"
    # The forwarder exited, the producer dropped its tensor and churned its allocator: the block is untouched.
    assert torch.equal(t.cpu(), torch.full((N_FWD,), 5.0)), "the forwarded block was reused"
    del t, view
    back.put("released")


def _fwd_producer(results: Any) -> None:
    to_mid, mid_out, mid_back = CTX.Queue(), CTX.Queue(), CTX.Queue()
    to_last, last_back = CTX.Queue(), CTX.Queue()
    mid = spawn_reporting(results, "forwarder", _fwd_middle, to_mid, mid_out, mid_back)
    last = spawn_reporting(results, "receiver", _fwd_last, to_last, last_back)
    t = torch.full((N_FWD,), 3.0, device="npu:0")
    torch.npu.current_stream().synchronize()  # set-up only; what follows is ordered by events
    to_mid.put(torch_npu_ipc.export_tensor(t))
    assert get(mid_back) == "forwarded"
    to_last.put(get(mid_out))
    assert get(last_back) == "holding"
    to_mid.put("exit")
    mid.join(60)
    assert mid.exitcode == 0
    st = torch_npu_ipc.sharing_stats()
    assert st["live_slots"] >= 2, f"the third process's references are not counted by the owner: {st}"
    # Drop ours: the block must go to limbo, not back to the allocator.
    del t
    assert torch_npu_ipc.sharing_stats()["limbo_blocks"] == 1
    assert torch_npu_ipc.ipc_collect() == 0
    churn = [torch.full((N_FWD,), -1.0, device="npu:0") for _ in range(8)]
    to_last.put("forwarder-gone")
    assert get(last_back) == "released"
    del churn
    deadline = time.monotonic() + 30
    freed = 0
    while time.monotonic() < deadline:
        freed += torch_npu_ipc.ipc_collect()
        if torch_npu_ipc.sharing_stats()["limbo_blocks"] == 0:
            break
        time.sleep(0.05)
    st = torch_npu_ipc.sharing_stats()
    assert freed == 1 and st["limbo_blocks"] == 0 and st["live_slots"] == 0, (freed, st)
    last.join(30)


@pytest.mark.devices(3)
def test_forwarding_to_a_third_process() -> None:
    """P -> A (peer npu:1) -> B (npu:2): B waits for A's write, and the block outlives A and P's drop."""
    s = Scenario()
    s.also_expect("forwarder")
    s.also_expect("receiver")
    s.start("producer", _fwd_producer, s.results)
    s.finish(timeout=180)


def _fwd_from_side_stream(q_in: Any, q_out: Any, back: Any) -> None:
    """Receive with a side stream current, forward at once from the Queue's feeder thread (default stream)."""
    side = torch.npu.Stream(device=0)
    back.put("ready")
    with torch.npu.stream(side):
        t = q_in.get(timeout=60)  # the side stream waits for the producer's write
    q_out.put(t)  # touches nothing
    assert q_in.get(timeout=60) == "exit"


def _fwd_reader(q_out: Any, back: Any) -> None:
    back.put("ready")
    t = q_out.get(timeout=60)
    back.put(t.cpu()[:4].tolist())


def test_a_forward_is_ordered_after_the_producers_write() -> None:
    """A forwarder received a tensor with a side stream current and forwards it untouched.

    Only the side stream waited for the producer's write; the forward recorded its event on the feeder
    thread's default stream, so the third process read the memory before the write (zeros).
    """
    q_in, q_out, back = CTX.Queue(), CTX.Queue(), CTX.Queue()
    mid = CTX.Process(target=_fwd_from_side_stream, args=(q_in, q_out, back))
    last = CTX.Process(target=_fwd_reader, args=(q_out, back))
    mid.start()
    last.start()
    try:
        assert [get(back), get(back)] == ["ready", "ready"]
        x = torch.zeros(1024, device="npu:0")
        torch.npu.synchronize()
        aclsim.sleep(torch.npu.current_stream(0).npu_stream, 2 * WORK)
        x.fill_(5.0)  # behind the sleep: still queued when the tensor is sent
        q_in.put(x)
        assert get(back) == [5.0] * 4, "the third process read the memory before the producer's write"
    finally:
        q_in.put("exit")
        for p in (mid, last):
            p.join(60)
    assert (mid.exitcode, last.exitcode) == (0, 0)


def _fwd_and_leave(q_in: Any, q_out: Any, back: Any, how: str) -> None:
    """Forward one tensor, then exit at once: normally (the exit waits) or by os._exit (no exit handlers)."""
    t = q_in.get(timeout=60)
    t.add_(1)
    q_out.put(t)
    q_out.close()
    q_out.join_thread()  # the descriptor is in the pipe
    back.put("forwarded")
    if how == "killed":
        back.close()
        back.join_thread()
        os._exit(0)


def _fwd_late_reader(q_out: Any, back: Any, go: Any) -> None:
    assert go.get(timeout=120) == "go"
    try:
        t = q_out.get(timeout=60)
        back.put(("ok", t.cpu().tolist()))
    except RuntimeError as e:
        back.put(("error", str(e)))


@pytest.mark.parametrize("how", ["exits", "exits-unreceived", "killed"])
def test_a_forwarder_that_leaves_before_its_receiver(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forwarder sends a tensor on and exits before the third process takes it from the queue.

    The third process opens the forwarder's event. A forwarder's exit did not wait for its forwards (only for
    its own sends): the receiver got the runtime's event error, and the producer's slot stayed taken until
    its unclaimed timeout. Now the exit waits as for its own sends, and withdraws what is still unreceived
    after that wait; a forwarder gone without its exit (killed) or after withdrawing gives the receiver an
    error naming it, and the producer's slot is free at once.
    """
    if how == "exits-unreceived":
        monkeypatch.setenv("TORCH_NPU_IPC_EXIT_GRACE_MS", "200")  # read by the forwarder at import
    elif how == "exits":
        # The third process must receive within the forwarder's exit grace, and it starts (imports torch)
        # alongside the forwarder: on a loaded machine it can lag by more than the 2 s default. The exit
        # ends as soon as the tensor is received, so a long grace costs nothing.
        monkeypatch.setenv("TORCH_NPU_IPC_EXIT_GRACE_MS", "30000")
    q_in, q_out, back, go = CTX.Queue(), CTX.Queue(), CTX.Queue(), CTX.Queue()
    mid = CTX.Process(target=_fwd_and_leave, args=(q_in, q_out, back, how))
    last = CTX.Process(target=_fwd_late_reader, args=(q_out, back, go))
    mid.start()
    last.start()
    x = torch.arange(4.0, device="npu:0")
    q_in.put(x)
    assert get(back) == "forwarded"
    if how == "exits":
        time.sleep(0.5)  # the forwarder's exit is waiting for the third process
        go.put("go")
        assert get(back) == ("ok", [1.0, 2.0, 3.0, 4.0])
    else:
        mid.join(60)
        assert torch_npu_ipc.sharing_stats()["unreceived_slots"] == (1 if how == "killed" else 0)
        go.put("go")
        kind, text = get(back)
        assert kind == "error" and f"process that forwarded this tensor (pid {mid.pid}) exited" in text, text
    for p in (mid, last):
        p.join(60)
    assert (mid.exitcode, last.exitcode) == (0, 0)
    st = settle(timeout=5)  # well before TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S
    assert st["live_slots"] == 0, st


TABLE_SLOTS = 4096  # RefTable::kSlots: one producer table's references


def _fwd_from_a_full_table(q: Any, back: Any) -> None:
    held = [torch_npu_ipc.import_tensor(b) for b in get(q)]
    back.put(torch_npu_ipc.export_tensor(held[0]))  # its slot's table has no free slot left
    assert get(q) == "exit"


@pytest.mark.filterwarnings("ignore:torch_npu_ipc.*waiting for their receivers")  # 4097 sends at once
def test_forwarding_when_the_producers_first_table_is_full() -> None:
    """A receiver holds every reference of the producer's first table, and forwards one of those tensors.

    A forward takes a slot in the producer's tables, and a forwarder cannot add tables: it tried only the table
    its tensor came through and failed ("the producer's reference table is full"), though the producer's next
    table had room. It now takes a slot in any of the producer's tables.
    """
    n = TABLE_SLOTS + 1
    x = torch.arange(float(n), device="npu:0")
    descriptors = [torch_npu_ipc.export_tensor(x[i : i + 1]) for i in range(n)]  # the last one opens table 2
    q, back = CTX.Queue(), CTX.Queue()
    mid = CTX.Process(target=_fwd_from_a_full_table, args=(q, back))
    mid.start()
    try:
        q.put(descriptors)
        forwarded = torch_npu_ipc.import_tensor(get(back))
        assert forwarded.cpu().tolist() == [0.0]
        assert torch_npu_ipc.sharing_stats()["live_slots"] == n + 1
        del forwarded
    finally:
        q.put("exit")
        mid.join(60)
    assert mid.exitcode == 0
    st = settle()
    assert st["live_slots"] == 0, st


UNCLAIMED_S = 2  # TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S for the next test


def _unclaimed_producer(results: Any) -> None:
    to_mid, mid_out, mid_back = CTX.Queue(), CTX.Queue(), CTX.Queue()
    mid = spawn_reporting(results, "forwarder", _fwd_middle, to_mid, mid_out, mid_back, False)
    t = torch.full((N_FWD,), 3.0, device="npu:0")
    u = torch.full((N_FWD,), 4.0, device="npu:0")
    torch.npu.current_stream().synchronize()  # set-up only
    to_mid.put(torch_npu_ipc.export_tensor(t))
    assert get(mid_back) == "forwarded"
    get(mid_out)  # the forwarder's descriptors (t and a view): dropped, nobody will receive them
    torch_npu_ipc.export_tensor(u)  # our own descriptor: dropped too
    to_mid.put("exit")
    mid.join(60)
    assert mid.exitcode == 0
    del t, u
    st = torch_npu_ipc.sharing_stats()
    assert st["limbo_blocks"] == 2, f"both blocks must wait for their unclaimed slots: {st}"
    start = time.monotonic()
    freed = 0
    while time.monotonic() < start + UNCLAIMED_S + 30 and torch_npu_ipc.sharing_stats()["limbo_blocks"]:
        freed += torch_npu_ipc.ipc_collect()
        time.sleep(0.1)
    waited = time.monotonic() - start
    st = torch_npu_ipc.sharing_stats()
    assert freed == 2 and st["limbo_blocks"] == 0 and st["live_slots"] == 0, (freed, st)
    assert waited >= UNCLAIMED_S - 0.2, f"unclaimed slots reclaimed after {waited:.1f} s, before the timeout"


@pytest.mark.devices(2)
def test_unclaimed_sends_and_forwards_are_reclaimed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Descriptors nobody receives, the producer's own and a killed forwarder's, free their blocks after the timeout.

    (A forwarder's normal exit withdraws its forwards nobody received: see
    test_a_forwarder_that_leaves_before_its_receiver.)

    The owner does not know when a forwarder sent, so it counts from the
    first collect that saw the forwarded slot.
    """
    monkeypatch.setenv("TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S", str(UNCLAIMED_S))
    s = Scenario()
    s.also_expect("forwarder")
    s.start("producer", _unclaimed_producer, s.results)
    s.finish(timeout=120)


def _sparse_consumer(q: Any, back: Any) -> None:
    """Receive sparse NPU tensors and send back what they hold, as CPU data."""
    while (item := get(q)) != "exit":
        t = item
        assert t.device == torch.device("npu:0") and t.layout == torch.sparse_coo, (t.device, t.layout)
        back.put((t._indices().cpu(), t._values().cpu(), tuple(t.shape), t.is_coalesced()))
        del t, item


def _sparse_producer(results: Any) -> None:
    q, back = CTX.Queue(), CTX.Queue()
    consumer = spawn_reporting(results, "consumer", _sparse_consumer, q, back)
    cases = [
        torch.sparse_coo_tensor(torch.tensor([[0, 2, 5]]), torch.tensor([1.0, -5.0, 7.5]), (8,)),
        torch.sparse_coo_tensor(torch.tensor([[0, 1], [2, 0]]), torch.tensor([3, 4], dtype=torch.int32), (2, 3)),
    ]
    for cpu in cases:
        t = cpu.to("npu:0")
        # export_tensor's bytes describe one strided storage: a sparse tensor is refused, naming its parts.
        with pytest.raises(TypeError, match=r"torch.sparse_coo tensor has no single storage.*_indices\(\)"):
            torch_npu_ipc.export_tensor(t)
        q.put(t)  # used to raise "Cannot access storage of SparseTensorImpl" in the Queue's feeder thread: lost
        indices, values, shape, coalesced = get(back)
        assert torch.equal(indices, cpu._indices()) and torch.equal(values, cpu._values()), (indices, values)
        assert shape == tuple(cpu.shape) and coalesced == cpu.is_coalesced()
    q.put("exit")
    consumer.join(60)


def test_sparse_tensors_travel_by_their_dense_parts() -> None:
    """A sparse COO NPU tensor is sent as torch.cuda sends one: its indices and values, each shared.

    ``export_tensor`` refuses one with a TypeError naming those parts (before: NotImplementedError
    "Cannot access storage of SparseTensorImpl").
    """
    s = Scenario()
    s.also_expect("consumer")
    s.start("producer", _sparse_producer, s.results)
    s.finish(timeout=180)
