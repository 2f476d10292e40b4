"""torch_npu_ipc.Event between real spawned processes on aclsim.

Each scenario makes the consumer's stream wait on an event recorded behind
slow simulated device work (``aclsim.sleep``), checks that the host did not
block (timing and counters) and that the data written before the record is
what the consumer reads; then the consumer records back and the producer's
stream waits on that (two-way handshake).

Data travels in npu tensors shared once, up front, through torch_npu's own
tensor reductions (called directly, not whatever ``torch_npu_ipc`` registers);
every later ordering comes from the plugin's events only.

Every multi-process scenario runs twice: as is, and with torch_npu's native
event IPC entry points monkeypatched to raise in every process
(``plugin_util.disable_native_event_ipc``), which proves that the plugin does
not lean on them.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
import torch.multiprocessing.reductions as torch_reductions
from helpers import join_all, torch_npu_version
from plugin_util import (
    HOST_FAST,
    NATIVE_EVENT_IPC,
    NO_NATIVE_ENV,
    SLACK,
    WORK,
    EventHoard,
    assert_stream_wait_only,
    check_native_state,
    delta,
    native_ways_usable,
    open_native,
    recv,
    requires_aclsim,
    share_native,
    start,
)

import aclsim
import torch_npu_ipc
from torch_npu_ipc import _C, Event, reductions

pytestmark = requires_aclsim

N = 4096  # elements of the shared data tensor

# The ways an event reaches the consumer in the two-process test.
PLUGIN_WAYS = ("queue", "process-arg", "handle", "reduce")
# Interop with torch_npu's own Event (only while its native IPC is enabled).
NATIVE_WAYS = ("native-export", "native-import")


@pytest.fixture(params=[False, True], ids=["native-ipc-on", "native-ipc-off"])
def no_native(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run the scenario as is, then with torch_npu's native event IPC disabled in every worker."""
    if not request.param and not NATIVE_EVENT_IPC:
        pytest.skip(f"torch_npu {torch_npu_version()} has no event IPC of its own: the native-ipc-off run covers it")
    if request.param:
        monkeypatch.setenv(NO_NATIVE_ENV, "1")
    else:
        monkeypatch.delenv(NO_NATIVE_ENV, raising=False)
    return bool(request.param)


def _common_worker_checks() -> None:
    assert os.environ.get("ACLSIM_ACTIVE"), "worker is not on aclsim"
    check_native_state()
    # Importing torch_npu_ipc installed the plugin's reductions.
    assert torch_reductions.reduce_event is reductions.reduce_event


# A loaded machine can deliver a message after the WORK it should overlap already ran, which
# would make the ordering proof vacuous (not wrong). Such a round is repeated, up to ATTEMPTS
# times; the data and counter checks are hard on every attempt.
ATTEMPTS = 4


def timing_problems(who: str, wait_cost: float, t_wait: float, t_work_start: float) -> list[str]:
    """Why a round proved nothing about ordering: the wait came too late, or the host was slow."""
    problems = []
    if t_wait >= t_work_start + WORK:
        problems.append(f"{who}: wait issued {t_wait - t_work_start:.3f}s after the work began (vacuous)")
    if wait_cost >= HOST_FAST:
        problems.append(f"{who}: wait call took {wait_cost:.3f}s")
    return problems


# --------------------------------------------------------------------------------------------
# One producer (npu:0), one consumer (npu:1): every way of passing an event, two-way handshake.
# --------------------------------------------------------------------------------------------


def p2p_producer(results: Any) -> None:
    """npu:0: for each way, slow work + fill + record, send; then wait on the consumer's record."""
    _common_worker_checks()
    torch.npu.set_device(0)
    s0 = torch.npu.current_stream()
    ctx = mp.get_context("spawn")
    to_cons, to_prod = ctx.Queue(), ctx.Queue()

    t = torch.zeros(N, device="npu:0")
    arg_event = Event(interprocess=True)  # reaches the consumer as a Process argument, not yet recorded
    with torch.npu.device(1):
        unrecorded = Event(interprocess=True)  # never recorded: must bind to npu:1, not the feeder's device
    assert torch.npu.current_device() == 0
    cons = ctx.Process(target=p2p_consumer, args=(arg_event, to_cons, to_prod, results), daemon=True)
    cons.start()
    to_cons.put(share_native(t))
    to_cons.put(unrecorded)  # reduced by the queue's feeder thread
    assert recv(to_prod, [cons]) == "ready"

    ways = PLUGIN_WAYS + NATIVE_WAYS if native_ways_usable() else PLUGIN_WAYS
    out: dict[str, Any] = {}
    keep: list[Any] = []  # the exporter keeps every event alive until the consumer is done
    for i, way in enumerate(ways):
        if way == "process-arg":
            ev = arg_event
        elif way == "native-export":
            ev = torch.npu.Event(interprocess=True)
        else:
            ev = Event(interprocess=True)
        keep.append(ev)
        problems: list[str] = []
        for attempt in range(ATTEMPTS):
            v = float(10 * (i + 1) + attempt)  # a new value every attempt: stale data always shows
            problems = []
            t_start = time.monotonic()
            aclsim.sleep(s0.npu_stream, WORK)
            t.fill_(v)  # runs only after WORK
            ev.record(s0)
            if time.monotonic() - t_start >= HOST_FAST:
                problems.append("producer: record took long")

            payload: Any
            if way == "queue":
                payload = ev
            elif way == "process-arg":
                payload = None
            elif way in ("handle", "native-import"):
                payload = ev.ipc_handle()
                assert isinstance(payload, bytes) and len(payload) == 64
            else:  # reduce, native-export (reduce_event of torch_npu's own Event)
                payload = reductions.reduce_event(ev)
                fn, args = torch_reductions.reduce_event(ev)
                assert fn is reductions.rebuild_event and payload == (fn, args), (payload, fn, args)
                assert args[0] == 0 and len(args[1]) == 64
            to_cons.put((way, payload, v, t_start))

            kind, t_back, consumer_problems = recv(to_prod, [cons])
            assert kind == "back"
            problems += consumer_problems
            before = aclsim.counters()
            t_wait = time.monotonic()
            ev.wait(s0)
            wait_cost = time.monotonic() - t_wait
            _ = s0.npu_stream  # hands torch_npu's queued tasks (a native wait) to the runtime; no device sync
            after = aclsim.counters()
            got = t.cpu()
            t_read = time.monotonic()
            # Hard checks, on every attempt: no host synchronization, the right data, not released early.
            assert_stream_wait_only(delta(before, after), f"{way}: producer wait")
            assert torch.equal(got, torch.full((N,), -v)), f"{way}: producer read {got[:4]} before the consumer's write"
            assert t_read >= t_back + WORK - SLACK, (
                f"{way}: released {t_read - t_back:.3f}s after the consumer's record"
            )
            problems += timing_problems("producer", wait_cost, t_wait, t_back)
            out[way] = {
                "producer_wait_cost": wait_cost,
                "producer_released_after": t_read - t_back,
                "attempts": attempt + 1,
            }
            if not problems:
                break
        assert not problems, f"{way}: no attempt out of {ATTEMPTS} proved the ordering: {problems}"
    to_cons.put("done")
    results.put(("producer", out))
    join_all([cons])


def p2p_consumer(arg_event: Event, to_cons: Any, to_prod: Any, results: Any) -> None:
    """npu:1: open each event, make its stream wait, read, then record back behind slow work."""
    _common_worker_checks()
    assert type(arg_event) is Event and arg_event.interprocess
    torch.npu.set_device(1)
    s1 = torch.npu.current_stream()
    t = open_native(to_cons.get(timeout=60))
    assert t.device == torch.device("npu", 0)
    unrecorded = to_cons.get(timeout=60)
    assert unrecorded.device == torch.device("npu", 1), f"never-recorded event bound to {unrecorded.device}"
    to_prod.put("ready")

    out: dict[str, Any] = {}
    while (msg := to_cons.get(timeout=60)) != "done":
        way, payload, v, t_start = msg
        if way == "queue":
            ev = payload
        elif way == "process-arg":
            ev = arg_event
        elif way == "handle":
            ev = Event.from_ipc_handle("npu:1", payload)  # opened on this process's device
        elif way == "native-import":
            ev = torch.npu.Event.from_ipc_handle(1, payload)
        else:
            fn, args = payload
            assert fn is reductions.rebuild_event
            ev = fn(*args)
        if way == "native-import":
            assert type(ev) is torch.npu.Event
        else:
            assert type(ev) is Event and ev.interprocess and ev.npu_event != 0, (way, ev)

        before = aclsim.counters()
        t_wait = time.monotonic()
        ev.wait(s1)
        wait_cost = time.monotonic() - t_wait
        _ = s1.npu_stream  # hands torch_npu's queued tasks (a native wait) to the runtime; no device sync
        after = aclsim.counters()
        d = t.to("npu:1")  # a copy ordered after s1, hence after the wait
        got = d.cpu()
        t_read = time.monotonic()
        assert_stream_wait_only(delta(before, after), f"{way}: consumer wait")
        assert torch.equal(got, torch.full((N,), v)), f"{way}: consumer read {got[:4]} before the producer's fill"
        assert t_read >= t_start + WORK - SLACK, f"{way}: released {t_read - t_start:.3f}s after the work began"
        problems = timing_problems("consumer", wait_cost, t_wait, t_start)

        # Record back on a stream of the event's device, behind slow work and a write into t.
        dev = ev.device.index
        with torch.npu.device(dev):
            sb = torch.npu.current_stream()
            t_back = time.monotonic()
            aclsim.sleep(sb.npu_stream, WORK)
            if dev == 0:
                t.fill_(-v)
            else:
                t.copy_(torch.full((N,), -v, device=f"npu:{dev}"))  # cross-device, ordered with sb
            ev.record(sb)
            if way == "native-import":
                # torch_npu queues a native record (task queue on) and returns before it reaches the
                # runtime: the producer's wait, issued once "back" arrives, could bind to the previous
                # record (seen in mode 2). Hand the record to the runtime, as docs/events.md says.
                _ = sb.npu_stream
        if time.monotonic() - t_back >= HOST_FAST:
            problems.append("consumer: record back took long")
        to_prod.put(("back", t_back, problems))
        out[way] = {"consumer_wait_cost": wait_cost, "consumer_released_after": t_read - t_start, "device": dev}
    results.put(("consumer", out))


@pytest.mark.devices(2)
@pytest.mark.usefixtures("no_native")
def test_two_way_handshake_every_way() -> None:
    """Event object through a Queue and as Process argument, handle bytes, reduce_event; npu:0 <-> npu:1."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    prod = start(p2p_producer, results, daemon=False)
    got = dict(recv(results, [prod], timeout=120) for _ in range(2))
    join_all([prod])
    ways = PLUGIN_WAYS if os.environ.get(NO_NATIVE_ENV) == "1" else PLUGIN_WAYS + NATIVE_WAYS
    assert sorted(got["producer"]) == sorted(ways)
    assert sorted(got["consumer"]) == sorted(ways)
    print("attempts per way:", {w: got["producer"][w]["attempts"] for w in ways})
    # Opened from handle bytes on npu:1: the consumer recorded back on npu:1 (cross-device both ways).
    assert got["consumer"]["handle"]["device"] == 1
    assert got["consumer"]["queue"]["device"] == 0


# --------------------------------------------------------------------------------------------
# One producer (npu:0), three consumers (npu:1..3).
# --------------------------------------------------------------------------------------------

CONSUMERS = 3
ROUNDS = 2


def fan_producer(results: Any) -> None:
    """npu:0: one event to three consumers, each by a different way; waits on the three back events."""
    _common_worker_checks()
    torch.npu.set_device(0)
    s0 = torch.npu.current_stream()
    ctx = mp.get_context("spawn")
    t = torch.zeros(N, device="npu:0")  # producer -> consumers
    u = torch.zeros(CONSUMERS + 1, device="npu:0")  # consumer k -> producer, in u[k]
    ev = Event(interprocess=True)
    back_q = ctx.Queue()
    qs = {k: ctx.Queue() for k in range(1, CONSUMERS + 1)}
    cons = [
        ctx.Process(target=fan_consumer, args=(k, ev if k == 1 else None, qs[k], back_q, results), daemon=True)
        for k in qs
    ]
    for p in cons:
        p.start()
    for q in qs.values():
        q.put((share_native(t), share_native(u)))
    for _ in qs:
        assert recv(back_q, cons) == "ready"

    waits = []
    clean, r, seen = 0, 0, []
    while clean < ROUNDS:  # rounds whose timing proved nothing are repeated (see ATTEMPTS)
        assert r < ROUNDS + ATTEMPTS - 1, f"only {clean} of {r} rounds proved the ordering: {seen}"
        v = float(r + 1)
        t_start = time.monotonic()
        aclsim.sleep(s0.npu_stream, WORK)
        t.fill_(v)
        ev.record(s0)  # re-recorded every round; a wait binds to the record current when issued
        for k, q in qs.items():
            payload = None if k == 1 else ev if k == 2 else ev.ipc_handle()
            q.put((payload, v, t_start))
        backs = [recv(back_q, cons) for _ in qs]
        problems = [p for b in backs for p in b[3]]
        before = aclsim.counters()
        t_wait = time.monotonic()
        for k, back, _, _ in backs:
            assert type(back) is Event and back.device.index == k
            back.wait(s0)  # an event of npu:k, waited on by npu:0
        wait_cost = time.monotonic() - t_wait
        assert_stream_wait_only(delta(before, aclsim.counters()), "producer wait on the back events")
        got = u.cpu()
        t_read = time.monotonic()
        expect = torch.tensor([0.0] + [-(10 * v + k) for k in qs])
        assert torch.equal(got, expect), f"round {r}: producer read {got}, expected {expect}"
        last_back = max(b[2] for b in backs)
        assert t_read >= last_back + WORK - SLACK, f"released {t_read - last_back:.3f}s after the last record"
        problems += timing_problems("producer", wait_cost, t_wait, last_back)
        if problems:
            seen.append(problems)
        else:
            clean += 1
        waits.append(wait_cost)
        r += 1
        del backs
    for q in qs.values():
        q.put("done")
    results.put(("producer", {"wait_costs": waits, "repeated_rounds": seen}))
    join_all(cons)


def fan_consumer(k: int, arg_event: Event | None, q: Any, back_q: Any, results: Any) -> None:
    """npu:k: wait on the producer's event (k=1: Process argument, k=2: Queue object, k=3: handle)."""
    _common_worker_checks()
    torch.npu.set_device(k)
    sk = torch.npu.current_stream()
    t, u = (open_native(x) for x in q.get(timeout=60))
    back = Event(interprocess=True)
    back_q.put("ready")
    costs = []
    while (msg := q.get(timeout=60)) != "done":
        payload, v, t_start = msg
        if k == 1:
            assert arg_event is not None
            ev = arg_event
        elif k == 2:
            ev = payload
        else:
            ev = Event.from_ipc_handle(torch.device("npu", k), payload)
        before = aclsim.counters()
        t_wait = time.monotonic()
        ev.wait(sk)
        cost = time.monotonic() - t_wait
        assert_stream_wait_only(delta(before, aclsim.counters()), f"consumer {k} wait")
        got = t.to(f"npu:{k}").cpu()
        t_read = time.monotonic()
        assert torch.equal(got, torch.full((N,), v)), f"consumer {k}, value {v}: read {got[:4]}"
        assert t_read >= t_start + WORK - SLACK, f"consumer {k}: released after {t_read - t_start:.3f}s"
        problems = timing_problems(f"consumer {k}", cost, t_wait, t_start)
        costs.append(cost)
        # Record back (on npu:k) behind slow work and a cross-device write into u[k].
        t_back = time.monotonic()
        aclsim.sleep(sk.npu_stream, WORK)
        u[k : k + 1].copy_(torch.full((1,), -(10 * v + k), device=f"npu:{k}"))
        back.record(sk)
        back_q.put((k, back, t_back, problems))  # the consumer's own event, consumer -> producer via a Queue
    results.put((f"consumer{k}", {"wait_costs": costs}))


@pytest.mark.devices(4)
@pytest.mark.usefixtures("no_native")
def test_one_producer_three_consumers() -> None:
    """npu:0 -> npu:1..3 through a Process argument, a Queue and handle bytes; events back through a Queue."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    prod = start(fan_producer, results, daemon=False)
    got = dict(recv(results, [prod], timeout=120) for _ in range(CONSUMERS + 1))
    join_all([prod])
    assert sorted(got) == ["consumer1", "consumer2", "consumer3", "producer"]
    print("repeated rounds:", got["producer"]["repeated_rounds"])


# --------------------------------------------------------------------------------------------
# 1,000 events through a queue: every created or opened IPC event is destroyed.
# --------------------------------------------------------------------------------------------

FLOOD = 1000


def flood_producer(q: Any, back: Any, results: Any) -> None:
    """Create, record and send FLOOD events, dropping each at once (the export grace covers the consumer)."""
    _common_worker_checks()
    torch.npu.set_device(0)
    s = torch.npu.current_stream()
    x = torch.ones(16, device="npu:0")
    s.synchronize()
    assert _C._ipc_event_unsupported_reason(0) == ""  # the support probe's trial event, before counting
    before = aclsim.counters()
    stats0 = _C._event_stats()
    for i in range(FLOOD):
        ev = Event(interprocess=True)
        if i % 2 == 0:
            x.add_(1)  # some device work behind some records
        ev.record(s)
        q.put(ev)
        del ev
    q.put(None)
    assert back.get(timeout=120) == "done"
    s.synchronize()
    _C._event_collect(True)
    after = aclsim.counters()
    stats = _C._event_stats()
    results.put(("producer", delta(before, after), {k: stats[k] - stats0.get(k, 0) for k in stats}, stats))


def flood_consumer(q: Any, back: Any, results: Any) -> None:
    """Open every event, make the stream wait on it, drop it."""
    _common_worker_checks()
    torch.npu.set_device(1)
    s = torch.npu.current_stream()
    s.synchronize()
    assert _C._ipc_event_unsupported_reason(1) == ""  # the support probe's trial event, before counting
    before = aclsim.counters()
    stats0 = _C._event_stats()
    n = 0
    while (ev := q.get(timeout=60)) is not None:
        assert type(ev) is Event
        ev.wait(s)
        n += 1
        del ev
    assert n == FLOOD
    s.synchronize()
    _C._event_collect(True)
    after = aclsim.counters()
    stats = _C._event_stats()
    back.put("done")
    results.put(("consumer", delta(before, after), {k: stats[k] - stats0.get(k, 0) for k in stats}, stats))


@pytest.mark.devices(2)
def test_thousand_events_through_a_queue() -> None:
    """aclsim counters: as many IPC event destroys as creates (producer) and opens (consumer)."""
    ctx = mp.get_context("spawn")
    q, back, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [start(flood_producer, q, back, results), start(flood_consumer, q, back, results)]
    got = {r[0]: r[1:] for r in (recv(results, procs, timeout=180) for _ in range(2))}
    join_all(procs)

    counts, stats_delta, stats = got["producer"]
    assert counts.get("ipc_event_create") == FLOOD, counts
    assert counts.get("ipc_event_destroy") == FLOOD, counts
    assert counts.get("event_create", 0) == counts.get("event_destroy", 0), counts  # fences included
    assert stats_delta["created"] == stats_delta["destroyed"] == FLOOD, stats_delta
    assert stats["retired_pending"] == 0, stats

    counts, stats_delta, stats = got["consumer"]
    assert counts.get("ipc_event_open") == FLOOD, counts
    assert counts.get("ipc_event_destroy") == FLOOD, counts
    assert counts.get("aclrtStreamWaitEvent", 0) >= FLOOD, counts
    # Opens are not creates for aclsim; every other event (the fences) is destroyed too.
    assert counts.get("event_create", 0) + FLOOD == counts.get("event_destroy", 0), counts
    assert stats_delta["created"] == stats_delta["destroyed"] == FLOOD, stats_delta
    assert stats["retired_pending"] == 0, stats


# --------------------------------------------------------------------------------------------
# Fuzzing from_ipc_handle: exceptions only, never a crash (hence a separate process).
# --------------------------------------------------------------------------------------------

FUZZ_EXAMPLES = 300
ALLOWED = (TypeError, ValueError, RuntimeError)


def fuzz_worker(results: Any) -> None:
    """Feed from_ipc_handle random, truncated and mutated handles, and odd types and devices."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    _common_worker_checks()
    torch.npu.set_device(0)
    source = Event(interprocess=True)
    source.record()
    valid = source.ipc_handle()
    outcomes: dict[str, int] = {}

    def attempt(device: Any, handle: Any) -> str:
        try:
            ev = Event.from_ipc_handle(device, handle)
        except ALLOWED as exc:
            kind = type(exc).__name__
        else:
            ev.wait()
            assert ev.query() in (True, False)
            kind = "opened"
            del ev
        outcomes[kind] = outcomes.get(kind, 0) + 1
        return kind

    fuzz = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    handles = st.one_of(
        st.binary(max_size=160),
        st.binary(min_size=64, max_size=64),
        st.integers(0, 64).map(lambda n: valid[:n]),  # truncated
        st.binary(min_size=1, max_size=16).map(lambda tail: valid + tail),  # too long
        st.tuples(st.integers(0, 63), st.integers(0, 255)).map(  # one byte changed
            lambda p: valid[: p[0]] + bytes([p[1]]) + valid[p[0] + 1 :]
        ),
        st.integers(0, 64).map(lambda n: valid[:n] + bytes(64 - n)),  # truncated, zero padded to 64
        st.just(bytearray(valid)),
        st.just(memoryview(valid)),
    )

    @fuzz
    @given(handles)
    def fuzz_handle(handle: bytes) -> None:
        attempt(0, handle)

    @fuzz
    @given(st.one_of(st.text(max_size=70), st.integers(), st.none(), st.lists(st.integers(0, 255), max_size=64)))
    def fuzz_handle_type(handle: Any) -> None:
        assert attempt(0, handle) == "TypeError", handle

    devices = st.one_of(
        st.integers(-3, 12),
        st.sampled_from(["npu", "npu:0", "npu:3", "npu:9", "cpu", "cuda:0", "meta", "bogus", "", None, 1.5]),
        st.sampled_from([torch.device("cpu"), torch.device("npu", 2), torch.device("meta")]),
    )

    @settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(devices)
    def fuzz_device(device: Any) -> None:
        attempt(device, valid)

    fuzz_handle()
    fuzz_handle_type()
    fuzz_device()
    results.put(outcomes)


def test_fuzz_from_ipc_handle() -> None:
    """Random, truncated and mutated handles: TypeError / ValueError / RuntimeError, never a crash."""
    results = mp.get_context("spawn").Queue()
    proc = start(fuzz_worker, results)
    outcomes = recv(results, [proc], timeout=120)
    join_all([proc])
    assert outcomes.get("RuntimeError", 0) > 0, outcomes  # forged 64-byte handles reach the runtime
    assert outcomes.get("ValueError", 0) > 0, outcomes
    assert outcomes.get("TypeError", 0) > 0, outcomes
    assert outcomes.get("opened", 0) > 0, outcomes


# --------------------------------------------------------------------------------------------
# Deferred destruction and the export grace (own process: the grace is read once per process).
# --------------------------------------------------------------------------------------------

GRACE_MS = 400


def lifetime_worker(results: Any) -> None:
    """Dropped events with pending work stay until it drained; exported ones stay for the grace."""
    _common_worker_checks()
    torch.npu.set_device(0)
    s0 = torch.npu.current_stream()
    s1 = torch.npu.Stream()
    _C._event_collect(True)
    base = _C._event_stats()

    def pending() -> int:
        return _C._event_stats()["retired_pending"]

    def destroyed() -> int:
        return _C._event_stats()["destroyed"] - base["destroyed"]

    # 1. A pending wait: s1 waits on a record queued behind WORK on s0; the event is dropped at once.
    ev = Event(interprocess=True)
    aclsim.sleep(s0.npu_stream, WORK)
    ev.record(s0)
    ev.wait(s1)
    c0 = aclsim.counters()
    del ev
    _C._event_collect(False)
    assert pending() == 1 and destroyed() == 0, _C._event_stats()
    assert delta(c0, aclsim.counters()).get("ipc_event_destroy", 0) == 0, "destroyed with a wait pending"
    s1.synchronize()  # the wait drained ...
    s0.synchronize()  # ... and so did the fence queued right behind the record
    _C._event_collect(False)
    assert pending() == 0 and destroyed() == 1, _C._event_stats()
    assert delta(c0, aclsim.counters()).get("ipc_event_destroy", 0) == 1

    # 2. A pending wait on a stream of another device (the record already ran).
    ev = Event(interprocess=True)
    ev.record(s0)
    s0.synchronize()  # only the wait is left pending
    with torch.npu.device(2):
        s2 = torch.npu.current_stream()
        aclsim.sleep(s2.npu_stream, WORK)  # the wait is queued behind this
        ev.wait(s2)
    del ev
    _C._event_collect(False)
    assert pending() == 1 and destroyed() == 1, _C._event_stats()
    s2.synchronize()
    _C._event_collect(False)
    assert pending() == 0 and destroyed() == 2, _C._event_stats()

    # 3. Exported, nothing pending: kept for the grace period, then collected without force.
    ev = Event(interprocess=True)
    ev.record(s0)
    s0.synchronize()
    handle = ev.ipc_handle()
    t_drop = time.monotonic()
    del ev
    _C._event_collect(False)
    if time.monotonic() - t_drop < GRACE_MS / 1000 * 0.8:
        assert pending() == 1 and destroyed() == 2, _C._event_stats()
    time.sleep(GRACE_MS / 1000 + 0.05)
    _C._event_collect(False)
    assert pending() == 0 and destroyed() == 3, _C._event_stats()
    # Destroyed: the handle is retracted, later opens fail cleanly, naming the rule and the grace.
    with pytest.raises(
        RuntimeError, match=r"(?s)aclrtIpcOpenEventHandle failed.*keep its Event alive.*EXPORT_GRACE_MS"
    ):
        Event.from_ipc_handle(0, handle)

    # 4. Exported and forced: _event_collect(True) ignores the grace.
    ev = Event(interprocess=True)
    ev.ipc_handle()
    del ev
    _C._event_collect(True)
    assert pending() == 0 and destroyed() == 4, _C._event_stats()

    # 5. An imported event gets no grace (its handle did not leave this process because of it).
    src = Event(interprocess=True)
    src.record(s0)
    imp = Event.from_ipc_handle(1, src.ipc_handle())
    del imp
    _C._event_collect(False)
    assert destroyed() == 5, _C._event_stats()
    del src
    _C._event_collect(True)
    assert destroyed() == 6 and pending() == 0, _C._event_stats()
    stats = _C._event_stats()
    assert stats["created"] - base["created"] == 6, stats
    results.put("ok")


def _run_alone(worker: Any) -> None:
    """Run ``worker(results)`` in a spawned process and expect it to put "ok"."""
    results = mp.get_context("spawn").Queue()
    proc = start(worker, results)
    assert recv(results, [proc], timeout=90) == "ok"
    join_all([proc])


@pytest.mark.devices(3)
def test_deferred_destruction_and_export_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """An event dropped with a pending wait survives until it drained; exported events get the grace."""
    monkeypatch.setenv("TORCH_NPU_IPC_EXPORT_GRACE_MS", str(GRACE_MS))
    _run_alone(lifetime_worker)


MAX_EVENTS = 256  # ACLSIM_MAX_EVENTS for the next test: enough for torch_npu, few to exhaust


def out_of_events_worker(results: Any) -> None:
    """Uses of an interprocess event on a stream that needs a new fence, with none left, then again."""
    torch.npu.set_device(0)
    s0 = torch.npu.current_stream()
    side, other = torch.npu.Stream(), torch.npu.Stream()
    ev = Event(interprocess=True)
    ev.record(s0)  # s0 gets its fence now
    hoard = EventHoard(MAX_EVENTS)
    ev.record(s0)  # s0 has its fence: still works
    c0 = aclsim.counters()
    with pytest.raises(RuntimeError, match="npu:0 has no event left"):
        ev.record(side)
    with pytest.raises(RuntimeError, match="npu:0 has no event left"):
        ev.wait(side)
    d = delta(c0, aclsim.counters())
    assert not d.get("aclrtRecordEvent") and not d.get("aclrtStreamWaitEvent"), f"a refused use issued calls: {d}"
    hoard.release()
    aclsim.sleep(side.npu_stream, WORK)
    t0 = time.monotonic()
    ev.record(side)
    assert not ev.query(), "the record after the refused ones does not cover side's work"
    ev.wait(other)
    other.synchronize()
    assert time.monotonic() - t0 >= WORK - SLACK, "the wait after the refused ones did not wait for the record"
    assert ev.query()
    results.put("ok")


def test_out_of_events_refuses_a_use_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    """No event left for a stream's fence: record/wait raise naming the fix, issue nothing, and work again after."""
    monkeypatch.setenv("ACLSIM_MAX_EVENTS", str(MAX_EVENTS))
    _run_alone(out_of_events_worker)


MAX_IPC = 4  # ACLSIM_MAX_IPC_EVENTS for the next test
IPC_GRACE_MS = 300  # TORCH_NPU_IPC_EXPORT_GRACE_MS for the next test


def dropped_events_worker(results: Any) -> None:
    """Every IPC event the device has was exported, then dropped: creating one more waits for the grace."""
    events = [Event(interprocess=True) for _ in range(MAX_IPC)]
    for e in events:
        e.ipc_handle()  # exported: each is kept for the grace once dropped
    del e, events
    with pytest.raises(RuntimeError, match=rf"{MAX_IPC} dropped interprocess Event\(s\) of this process still exist"):
        Event(interprocess=True).ipc_handle()
    time.sleep(IPC_GRACE_MS / 1000 + 0.2)
    assert len(Event(interprocess=True).ipc_handle()) == 64  # nothing was dropped since: a collect must run here
    results.put("ok")


def test_dropped_events_past_their_grace_make_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device's IPC events are all dropped but kept for the export grace; once it passed, creation works.

    Dropped events were destroyed only when a later one was dropped, so creating one failed after the grace
    too; the error did not say that the process's own dropped events held them.
    """
    monkeypatch.setenv("ACLSIM_MAX_IPC_EVENTS", str(MAX_IPC))
    monkeypatch.setenv("TORCH_NPU_IPC_EXPORT_GRACE_MS", str(IPC_GRACE_MS))
    _run_alone(dropped_events_worker)


# --------------------------------------------------------------------------------------------
# In this process: argument validation and the device a never-recorded event binds to.
# --------------------------------------------------------------------------------------------


def test_interprocess_with_timing_is_rejected() -> None:
    """interprocess=True with enable_timing=True raises ValueError, as in torch.cuda."""
    with pytest.raises(ValueError, match="enable_timing"):
        Event(enable_timing=True, interprocess=True)
    e = Event(enable_timing=True)  # fine without interprocess
    assert not e.interprocess


@pytest.mark.devices(2)
def test_event_dropped_right_after_a_cross_device_wait() -> None:
    """Record on npu:1, wait on npu:0, drop at once: the wait reaches the runtime before the event dies.

    torch_npu queues the wait behind npu:0's tasks and the event's
    destruction behind npu:1's; with the task queue on, the destruction won
    and the wait failed with "invalid event handle" (torch_npu's own
    ``torch.npu.Stream.wait_stream`` across devices does this with its events).
    """
    side = torch.npu.Stream(device=1)
    torch.ones(1, device="npu:1")
    for _ in range(200):
        e = Event()
        e.record(side)
        e.wait(torch.npu.current_stream(0))
        del e
    torch.npu.synchronize(0)
    torch.npu.synchronize(1)


def test_torch_cuda_signature_with_external() -> None:
    """torch.cuda.Event's ``external`` keyword is accepted (False) and refused with a reason (True)."""
    assert Event(interprocess=True, external=False).interprocess
    assert Event(False, False, True, False).interprocess  # positional, in torch.cuda's order
    with pytest.raises(ValueError, match="external=True"):
        Event(external=True)


@pytest.mark.parametrize(
    ("handle", "exc"),
    [
        ("x" * 64, TypeError),
        (None, TypeError),
        (64, TypeError),
        ([0] * 64, TypeError),
        (b"", ValueError),
        (bytes(63), ValueError),
        (bytes(65), ValueError),
        (bytes(64), RuntimeError),
        (b"aclsim:e:1:1:0000000000000000".ljust(64, b"\0"), RuntimeError),
    ],
    ids=["str", "none", "int", "list", "empty", "short", "long", "zeros", "forged"],
)
def test_from_ipc_handle_rejects_bad_handles(handle: Any, exc: type[Exception]) -> None:
    """Wrong type -> TypeError, wrong size -> ValueError, forged bytes -> RuntimeError."""
    with pytest.raises(exc):
        Event.from_ipc_handle(0, handle)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "meta", "cuda:0", 99, -1, "npu:99", "npu:abc", "npu:"])
def test_from_ipc_handle_rejects_bad_devices(device: Any) -> None:
    """A non-NPU device or an NPU that does not exist -> ValueError."""
    src = Event(interprocess=True)
    with pytest.raises(ValueError):
        Event.from_ipc_handle(device, src.ipc_handle())


@pytest.mark.parametrize("device", [-1, -128, 4, 99, 127])
def test_core_event_constructors_reject_bad_devices(device: int) -> None:
    """The core's own constructors check the index too (a bad one indexed the event pools: segfault)."""
    from torch_npu_ipc import _C

    for make in (_C._IpcEvent.acquire, _C._IpcEvent.create):
        with pytest.raises(ValueError, match=f"no NPU device {device} "):
            make(device)


def test_non_interprocess_event_is_not_shareable() -> None:
    """ipc_handle() and reduce_event need interprocess=True; elapsed_time is refused on IPC events."""
    e = Event()
    with pytest.raises(RuntimeError):
        e.ipc_handle()
    with pytest.raises(RuntimeError):
        reductions.reduce_event(e)
    ipc = Event(interprocess=True)
    with pytest.raises(RuntimeError):
        ipc.elapsed_time(ipc)


def test_non_interprocess_event_is_torch_npus() -> None:
    """Without interprocess the Event is torch_npu's own: record, query, synchronize, timing."""
    s = torch.npu.current_stream()
    a, b = Event(enable_timing=True), Event(enable_timing=True)
    a.record(s)
    a.synchronize()  # aclsim stamps a record when it runs: a late run would shorten the interval below 50 ms
    aclsim.sleep(s.npu_stream, 0.05)
    b.record(s)
    b.synchronize()
    assert a.query() and b.query()
    assert a.elapsed_time(b) >= 40.0


def test_interprocess_event_in_process() -> None:
    """query() before and after a record, synchronize() blocks the host, blocking=True waits block."""
    torch.npu.set_device(0)
    s = torch.npu.current_stream()
    e = Event(interprocess=True)
    assert e.npu_event == 0 and e.query() and "uninitialized" in repr(e)
    e.wait(s)  # never recorded anywhere: nothing to wait for
    aclsim.sleep(s.npu_stream, WORK)
    t0 = time.monotonic()
    e.record(s)
    assert not e.query()
    e.synchronize()
    assert time.monotonic() - t0 >= WORK - SLACK
    assert e.query() and e.npu_event != 0

    blocking = Event(blocking=True, interprocess=True)
    aclsim.sleep(s.npu_stream, WORK)
    t0 = time.monotonic()
    blocking.record(s)
    other = torch.npu.Stream()
    blocking.wait(other)
    assert time.monotonic() - t0 >= WORK - SLACK, "blocking=True wait returned before the record ran"
    torch.npu.synchronize()


@pytest.mark.devices(3)
def test_streams_of_devices_other_than_the_current_one() -> None:
    """record/wait on streams of other devices than the thread's current one are ordered right."""
    torch.npu.set_device(0)
    s1 = torch.npu.Stream(device=1)
    s2 = torch.npu.Stream(device=2)
    x = torch.zeros(8, device="npu:1")
    # The zeros run on npu:1's default stream, which nothing orders with s1: only the WORK below
    # kept them ahead of the fill (a default stream delayed past it left x at 0).
    torch.npu.synchronize(1)
    e = Event(interprocess=True)
    with torch.npu.stream(s1):
        t0 = time.monotonic()
        aclsim.sleep(s1.npu_stream, WORK)
        x.fill_(3.0)  # launched on s1 through torch_npu's task queue
    e.record(s1)  # current device 0, stream of npu:1: the event is created on npu:1
    assert e.device == torch.device("npu", 1) and torch.npu.current_device() == 0
    e.wait(s2)
    with torch.npu.stream(s2):
        y = x.to("npu:2")  # two-way barrier with s2: after its wait
        got = y.cpu()  # on s2 too (npu:2's default stream is not ordered with s2)
    assert time.monotonic() - t0 >= WORK - SLACK
    assert torch.equal(got, torch.full((8,), 3.0))
    assert torch.npu.current_device() == 0


@pytest.mark.parametrize(
    ("stream_device", "current"),
    [pytest.param(1, 0, marks=pytest.mark.devices(2)), pytest.param(0, 2, marks=pytest.mark.devices(3))],
)
def test_record_covers_queued_work_on_a_non_current_device(stream_device: int, current: int) -> None:
    """record(stream) drains torch_npu's queue of the STREAM's device, not of the thread's current one.

    torch_npu's NPUStream::stream() drains the current device's queue; a
    record on another device's stream used to land before work still queued
    for it (seen under TASK_QUEUE_ENABLE=2).
    """
    torch.npu.set_device(current)
    s = torch.npu.Stream(device=stream_device)
    other = torch.npu.Stream(device=stream_device)
    x = torch.zeros(1 << 14, device=f"npu:{stream_device}")
    # The zeros run on the default stream, which nothing below orders with s:
    # left queued, they could land after the first fill (seen once on CI's 2 cores).
    torch.npu.synchronize(stream_device)
    stale = []
    for i in range(1, 151):
        e = Event(interprocess=True)
        with torch.npu.stream(s):
            aclsim.sleep(s.npu_stream, 0.0005)
            x.fill_(float(i))  # queued by torch_npu, behind the sleep
        e.record(s)
        e.synchronize()  # the host knows the record ran ...
        with torch.npu.stream(other):
            v = x[:1].cpu().item()  # ... so the fill before it did too (read on an unordered stream)
        if v != i:
            stale.append((i, v))
    assert torch.npu.current_device() == current
    assert not stale, f"records ran before work queued ahead of them: {stale[:5]} ({len(stale)} of 150)"


@pytest.mark.devices(2)
def test_record_on_another_devices_stream_is_refused() -> None:
    """An IPC event belongs to one device: recording it on another device's stream raises ValueError."""
    torch.npu.set_device(0)
    e = Event(interprocess=True)
    e.record(torch.npu.current_stream(0))
    with torch.npu.device(1):
        s1 = torch.npu.current_stream()
        with pytest.raises(ValueError, match="npu:0"):
            e.record(s1)
        e.wait(s1)  # waiting from any device is fine
    torch.npu.synchronize()


@pytest.mark.devices(2)
@pytest.mark.parametrize("thread_device", [0, None], ids=["thread-on-npu0", "thread-without-device"])
def test_lazy_event_binds_to_creating_threads_device(thread_device: int | None) -> None:
    """A never-recorded event created under npu:1 stays on npu:1 when another thread asks for its handle."""
    import threading

    torch.npu.set_device(0)
    with torch.npu.device(1):
        e = Event(interprocess=True)
    assert torch.npu.current_device() == 0
    out: dict[str, Any] = {}

    def feeder() -> None:
        try:
            if thread_device is not None:
                torch.npu.set_device(thread_device)
            out["handle"] = e.ipc_handle()
            out["reduced"] = reductions.reduce_event(e)
            out["device_after"] = torch.npu.current_device()
        except BaseException as exc:
            out["error"] = exc

    th = threading.Thread(target=feeder)
    th.start()
    th.join(30)
    assert "error" not in out, out.get("error")
    assert len(out["handle"]) == 64
    assert e.device == torch.device("npu", 1)
    assert out["reduced"][1][0] == 1
    # A thread without a device is on npu:0 for torch_npu, before and after.
    assert out["device_after"] == (0 if thread_device is None else thread_device), (
        "ipc_handle() changed the calling thread's device"
    )
    # The ACL event really lives on npu:1: it records on an npu:1 stream, and not on npu:0's.
    with torch.npu.device(1):
        e.record(torch.npu.current_stream())
    with pytest.raises(ValueError):
        e.record(torch.npu.current_stream(0))
    assert torch.npu.current_device() == 0
    torch.npu.synchronize()


_FRESH_THREAD_CALLS = {
    "record": lambda ev, s1: ev.record(s1),
    "wait": lambda ev, s1: ev.wait(s1),
    "from_ipc_handle": lambda ev, s1: Event.from_ipc_handle(1, ev.ipc_handle()),
    "new_event_record": lambda ev, s1: Event(interprocess=True).record(s1),
    "copy_to_npu1": lambda ev, s1: torch.ones(4, device="npu:1").to("npu:0"),
    "share_npu1_tensor": lambda ev, s1: torch_npu_ipc.import_tensor(
        torch_npu_ipc.export_tensor(torch.ones(4, device="npu:1"))
    ),
}


@pytest.mark.devices(2)
@pytest.mark.parametrize("call", sorted(_FRESH_THREAD_CALLS))
def test_a_thread_without_a_device_stays_on_npu0(call: str) -> None:
    """A thread that never chose a device calls the plugin on npu:1: it stays on npu:0, as with torch_npu's calls.

    The plugin sets ACL's device for such calls; it left the thread on npu:1 (where torch_npu's per-thread
    cache then also put it), so the thread's next ``torch.ones(device="npu")`` landed on npu:1.
    """
    import threading

    torch.npu.set_device(1)
    ev = Event(interprocess=True)
    ev.record()
    s1 = torch.npu.current_stream(1)
    torch.npu.set_device(0)
    out: dict[str, Any] = {}

    def worker() -> None:
        try:
            _FRESH_THREAD_CALLS[call](ev, s1)
            x = torch.ones(4, device="npu") + 1
            out["after"] = (torch.npu.current_device(), x.device, x.cpu().tolist())
        except BaseException as exc:
            out["error"] = exc

    th = threading.Thread(target=worker)
    th.start()
    th.join(60)
    assert not th.is_alive(), "the worker thread hung"
    assert "error" not in out, out.get("error")
    assert out["after"] == (0, torch.device("npu", 0), [2.0] * 4), out["after"]
    torch.npu.synchronize()


def test_reduce_event_matches_torch_multiprocessing() -> None:
    """torch.multiprocessing.reductions.reduce_event is the plugin's; a round trip in-process works."""
    assert torch_reductions.reduce_event is reductions.reduce_event
    e = Event(interprocess=True)
    e.record()
    fn, args = torch_reductions.reduce_event(e)
    assert fn is reductions.rebuild_event
    assert args == (e.device.index, e.ipc_handle(), False)
    assert reductions.reduce_event(e) == (fn, args)
    again = fn(*args)
    assert type(again) is Event and again.interprocess and again.device == e.device
    assert torch_npu_ipc.Event is Event


def _blocking_consumer(q: Any, results: Any) -> None:
    ev = q.get()
    results.put("got")
    assert q.get() == "recorded"
    ev.wait()  # blocking=True travelled with the event: the host waits for the producer's record
    results.put(ev.query())


def test_blocking_event_stays_blocking_through_a_queue() -> None:
    """An Event(interprocess=True, blocking=True) received from a queue blocks in wait() as the sender's does.

    The pickled form carried only the device and the handle, so the received
    event's wait() returned at once, before the producer's record ran.
    """
    ctx = mp.get_context("spawn")
    q, results = ctx.Queue(), ctx.Queue()
    proc = start(_blocking_consumer, q, results)
    s = torch.npu.current_stream()
    ev = Event(interprocess=True, blocking=True)
    ev.record(s)
    q.put(ev)
    assert recv(results, [proc]) == "got"
    aclsim.sleep(s.npu_stream, WORK)
    ev.record(s)
    q.put("recorded")
    assert recv(results, [proc]) is True, "the received blocking event's wait() returned before the record ran"
    join_all([proc])
    fn, args = reductions.reduce_event(ev)
    assert fn(*args)._blocking, "rebuild_event dropped blocking=True"


def test_lazy_creation_makes_one_event_whatever_thread_comes_first() -> None:
    """Threads racing to create a fresh Event (handle, record) share one ACL event.

    A queue's feeder thread asks for the handle of an Event put before it was
    recorded while the owner records it; two ACL events would give the
    receiver a handle to an event that never gets the record.
    """
    import threading

    torch.npu.set_device(0)
    s = torch.npu.current_stream()
    created = _C._event_stats()["created"]
    events = 20
    lost = []
    # Every record below queues behind this one sleep: none has run when its handle is queried, even if a
    # loaded machine stalls the rounds for a while. (A 0.2 s sleep per round gave each round's three
    # threads and calls only 0.2 s before its record could run and make the query vacuous.)
    gate = 4.0  # 20 rounds took about 1 s on a loaded 2-core machine (49 ms each)
    t_gate = time.monotonic()
    aclsim.sleep(s.npu_stream, gate)
    for i in range(events):
        e = Event(interprocess=True)
        start_line = threading.Barrier(4)
        handles: list[bytes] = []

        def take_handle(
            e: Event = e, start_line: threading.Barrier = start_line, handles: list[bytes] = handles
        ) -> None:
            start_line.wait()
            handles.append(e.ipc_handle())

        threads = [threading.Thread(target=take_handle) for _ in range(3)]
        for th in threads:
            th.start()
        start_line.wait()
        e.record(s)
        for th in threads:
            th.join(30)
        assert len(set(handles)) == 1, f"event {i}: threads got {len(set(handles))} different handles"
        if Event.from_ipc_handle(0, handles[0]).query():  # the record has not run yet (the gate is ahead of it)
            lost.append(i)
    took = time.monotonic() - t_gate
    s.synchronize()
    assert not lost, (
        f"handles of {len(lost)} of {events} events name an event the record did not reach "
        f"(the rounds took {took:.2f} s of the {gate} s gate)"
    )
    # One ACL event per Event object and one per opened copy.
    assert _C._event_stats()["created"] - created == 2 * events


@pytest.mark.parametrize("bad", [5, "s", object(), torch.device("npu:0")])
@pytest.mark.parametrize("interprocess", [False, True], ids=["plain", "interprocess"])
def test_record_and_wait_name_a_wrong_stream_argument(bad: object, interprocess: bool) -> None:
    e = Event(interprocess=interprocess)
    with pytest.raises(TypeError, match=r"Event\.record\(\) takes a torch\.npu\.Stream"):
        e.record(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Event\.wait\(\) takes a torch\.npu\.Stream"):
        e.wait(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", ["enable_timing", "blocking", "interprocess", "external"])
@pytest.mark.parametrize("bad", ["yes", None, 1.0])
def test_flags_name_a_wrong_type(flag: str, bad: object) -> None:
    """A flag that is not a bool or an int is a TypeError naming it (before: the base class's
    "'str' object cannot be interpreted as an integer", or interprocess="yes" taken as True)."""
    with pytest.raises(TypeError, match=rf"Event\(\): {flag} must be a bool, got"):
        Event(**{flag: bad})
    with pytest.raises(TypeError, match=r"Event\.from_ipc_handle\(\): blocking must be a bool"):
        Event.from_ipc_handle(0, bytes(64), blocking=bad)


def test_flags_take_ints_as_torch_cuda_does() -> None:
    assert Event(interprocess=1).interprocess is True
    assert Event(blocking=0, interprocess=0).interprocess is False


def test_elapsed_time_to_an_interprocess_event_names_it() -> None:
    """A timing event's elapsed_time to an interprocess one says why, whichever side it is on."""
    start, ipc = Event(enable_timing=True), Event(interprocess=True)
    start.record()
    ipc.record()
    for a, b in ((start, ipc), (ipc, start)):
        with pytest.raises(RuntimeError, match="not available on interprocess events"):
            a.elapsed_time(b)
    torch.npu.synchronize()


def test_reduce_event_refuses_a_native_event_without_interprocess() -> None:
    """A plain torch.npu.Event is refused at the sender, not the receiver, naming interprocess=True.

    CANN refuses its handle (107000: torch_npu raises a bare ACL error); a
    runtime that answers "not supported" makes torch_npu return zeros.
    """
    e = torch.npu.Event()
    e.record()
    with pytest.raises(RuntimeError, match=r"interprocess=True"):
        torch_reductions.reduce_event(e)
    torch.npu.synchronize()


def test_native_events_are_pickled_by_the_plugin() -> None:
    """A torch.npu.Event put on a queue goes through the plugin's reducer, not torch_npu's.

    ForkingPickler looks reducers up by exact type and torch_npu registered its
    own for torch.npu.Event: a plain one was pickled with an all-zero handle
    and only the receiver failed (ACL error 107000); an interprocess one
    arrived as torch_npu's class, not as a torch_npu_ipc.Event as documented.
    """
    import io
    import pickle
    from multiprocessing.reduction import ForkingPickler

    plain = torch.npu.Event()
    plain.record()
    with pytest.raises(RuntimeError, match=r"interprocess=True"):
        ForkingPickler(io.BytesIO(), pickle.HIGHEST_PROTOCOL).dump(plain)
    if not NATIVE_EVENT_IPC:
        return  # this torch_npu's Event has no ipc_handle: the refusal above is all there is
    ipc = torch.npu.Event(interprocess=True)
    ipc.record()
    rebuilt = pickle.loads(ForkingPickler.dumps(ipc))
    assert type(rebuilt) is torch_npu_ipc.Event
    assert rebuilt.ipc_handle() == ipc.ipc_handle()
    torch.npu.synchronize()


_EXIT_WITH_BUSY_DAEMONS = """
import torch_npu_ipc  # isort: split
import threading, time
import torch

def new_events():
    while True:
        torch_npu_ipc.Event(interprocess=True).ipc_handle()

def records():
    e = torch_npu_ipc.Event(interprocess=True)
    while True:
        e.record()
        e.query()

def collects():
    while True:
        torch_npu_ipc.ipc_collect()

# No tensor is made or freed in these loops: torch itself releases the GIL to free
# a tensor, with the same abort at exit (docs/troubleshooting.md).
for fn in (new_events, records, collects):
    threading.Thread(target=fn, daemon=True).start()
time.sleep(0.5)
print("exiting", flush=True)
"""


def test_exit_with_daemon_threads_inside_plugin_calls() -> None:
    """A program that exits while daemon threads are in plugin calls exits normally.

    CPython ends such a thread when it takes the GIL back during
    finalization; through pybind11's gil_scoped_release that aborted the
    process ("terminate called without an active exception", 6 of 6 runs).
    """
    import subprocess
    import sys

    for _ in range(3):
        r = subprocess.run(
            [sys.executable, "-c", _EXIT_WITH_BUSY_DAEMONS], capture_output=True, text=True, timeout=120, check=False
        )
        assert r.returncode == 0 and "exiting" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])
        assert "terminate called" not in r.stderr, r.stderr[-2000:]
