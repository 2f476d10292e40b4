"""External streams: ``torch_npu_ipc.ExternalStream`` wraps an ``aclrtStream`` another library owns.

torch_npu launches its ops on the foreign stream, and, beyond upstream's
``torch.npu.ExternalStream``, :meth:`ExternalStream.synchronize`,
:meth:`ExternalStream.query` and event record / wait on it work: the C++ core
drains torch_npu's task queue and then calls ACL on the raw stream.

Two implementations:

* native (torch_npu exports ``c10_npu::getStreamFromExternal``, e.g. 2.13):
  torch_npu's ops run on the foreign stream itself;
* proxy (older torch_npu, or torch_npu's per-stream task queue on, which
  refuses external streams): torch_npu's ops run on a torch_npu pool stream
  (the proxy), ordered with the foreign stream by events at construction, at
  :meth:`ExternalStream.fence` and around every event record / wait.

See docs/external_stream.md.
"""

from __future__ import annotations

import inspect
import operator
import os
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch_npu

from torch_npu_ipc import _C, _patch
from torch_npu_ipc._device import npu_index, per_stream_queue_on, stream_triple

__all__ = ["ExternalStream"]

_MAX_PTR = 2**64 - 1

# torch_npu's native entry point (None: use the proxy implementation). Tests
# set it to None to exercise the proxy path.
_from_external: Callable[[int, int], tuple[int, int, int]] | None = (
    _C._stream_from_external if _C._stream_from_external_available() else None
)

_PER_STREAM_WARNED = False

_LOCK = threading.Lock()
# stream_ptr -> the live ExternalStreams wrapping it, all of one device (to reject a second device
# while any of them lives, not only the latest).
_LIVE: dict[int, weakref.WeakSet[ExternalStream]] = {}
# (device_index, stream_id) of torch_npu's native external streams -> _Ext.
_NATIVE_IDS: dict[tuple[int, int], _Ext] = {}
# (device_index, stream_ptr) -> proxy stream triple (proxy implementation).
_PROXIES: dict[tuple[int, int], tuple[int, int, int]] = {}


def _live_wrapper(ptr: int) -> ExternalStream | None:
    """A live ExternalStream of ``ptr``, if any (caller holds _LOCK); forgets pointers none wraps."""
    wrappers = _LIVE.get(ptr)
    other = next(iter(wrappers), None) if wrappers is not None else None
    if wrappers is not None and other is None:
        del _LIVE[ptr]
    if len(_LIVE) > 256:  # pointers wrapped once and dropped long ago
        for key in [key for key, live in _LIVE.items() if not live]:
            del _LIVE[key]
    return other


@dataclass(frozen=True)
class _Ext:
    """What the helpers need to know about an external stream."""

    ptr: int  # the foreign aclrtStream
    device: int
    triple: tuple[int, int, int]  # torch_npu's stream (the foreign one, or the proxy)
    native: bool


_RECORD_STREAM_MSG = (
    "Tensor.record_stream() is not supported on an ExternalStream: torch_npu's caching allocator "
    "can only track streams it manages (it records an event on them when the block is freed), and "
    "it knows nothing of work the owning library queues on this stream. Instead, keep the tensor "
    "alive until that work is done: free it after ext.synchronize(), or after a torch_npu stream "
    "waited for an event recorded on ext (torch.npu.current_stream().wait_stream(ext))."
)
_CAPTURE_MSG = (
    "NPU graph capture on an ExternalStream is not supported: capture turns the stream into a "
    "capture stream, which would also swallow the owning library's work queued on it meanwhile, "
    "and torch_npu only captures streams it manages. Capture on a torch_npu stream instead "
    "(torch.npu.graph(g) uses its own), and order it with the external stream by events: "
    "s.wait_stream(ext) before, ext.wait_stream(s) after."
)


def _validate_ptr(stream_ptr: Any) -> int:
    if stream_ptr is None:
        raise ValueError("stream_ptr must be a non-zero aclrtStream address, got None")
    if isinstance(stream_ptr, bool):
        raise TypeError("stream_ptr must be an int (the aclrtStream address), got bool")
    try:
        ptr = operator.index(stream_ptr)
    except TypeError:
        raise TypeError(
            f"stream_ptr must be an int (the aclrtStream address), got {type(stream_ptr).__name__}"
        ) from None
    if ptr == 0:
        raise ValueError("stream_ptr must be a non-zero aclrtStream address, got 0 (the null stream)")
    if ptr < 0:
        raise ValueError(f"stream_ptr must be a non-negative address, got {ptr}")
    if ptr > _MAX_PTR:
        raise ValueError(f"stream_ptr {ptr:#x} does not fit in 64 bits")
    return ptr


def _check_usable(ptr: int, index: int) -> None:
    """Raise ValueError unless the runtime takes work on stream ``ptr`` from npu:``index``."""
    problem, other_context = _C._ext_probe(ptr, index)
    if not problem:
        return
    if other_context:
        owner = _C._ext_stream_device(ptr, index)
        if owner >= 0:
            raise ValueError(
                f"stream_ptr {ptr:#x} is a stream of npu:{owner}, not of npu:{index}: the runtime refuses work on "
                f"it with npu:{index} current ({problem}). Pass device={owner}, the device it was created on"
            )
        raise ValueError(
            f"stream_ptr {ptr:#x} belongs to another device or context than npu:{index}'s: the runtime refuses "
            f"work on it with npu:{index} current ({problem}). Pass the device it was created on; a stream of a "
            "context created with aclrtCreateContext cannot be used by torch_npu, which runs in the device's "
            "primary context"
        )
    raise ValueError(
        f"stream_ptr {ptr:#x} is not a live aclrtStream usable on npu:{index} ({problem}); "
        "pass the device the stream was created on, and keep the stream alive while it is wrapped"
    )


def per_stream_queue_refusal() -> str:
    """Why torch_npu would refuse a native external stream here ('' when it would not).

    torch_npu's per-stream task queue (``PER_STREAM_QUEUE`` set to a non-zero
    integer, with the task queue on) raises "External NPU stream is not
    supported" at the first op, event or synchronize on one.
    """
    if not per_stream_queue_on():
        return ""
    value = os.environ.get("PER_STREAM_QUEUE", "")
    return f"torch_npu's per-stream task queue (PER_STREAM_QUEUE={value}) does not support external streams"


def _native_entry() -> Callable[[int, int], tuple[int, int, int]] | None:
    """torch_npu's getStreamFromExternal when a new ExternalStream can use it; None: use a proxy."""
    global _PER_STREAM_WARNED
    if _from_external is None:
        return None
    refusal = per_stream_queue_refusal()
    if not refusal:
        return _from_external
    if not _PER_STREAM_WARNED:
        _PER_STREAM_WARNED = True
        warnings.warn(
            f"{refusal}: ExternalStream uses the proxy implementation instead (torch_npu's ops run on a "
            "torch_npu stream, ordered with the foreign stream by events at construction, at fence() and "
            "around event record / wait; see docs/external_stream.md). Unset PER_STREAM_QUEUE to run "
            "torch_npu's ops on the foreign stream itself.",
            stacklevel=3,
        )
    return None


class ExternalStream(torch_npu.npu.Stream):
    r"""Wrapper around an ``aclrtStream`` created and owned by another library.

    torch_npu launches its ops on the foreign stream while it is current
    (``torch.npu.stream(ext)``, ``torch.npu.set_stream(ext)``), so their order
    with the other library's work on the same stream is the order in which
    the work was queued. Unlike ``torch.npu.ExternalStream``,
    :meth:`synchronize`, :meth:`query`, :meth:`record_event`,
    :meth:`wait_event` / :meth:`wait_stream`, and ``torch_npu_ipc.Event`` and
    ``torch.npu.Event`` record / wait work on it.

    Args:
        stream_ptr (int): the ``aclrtStream`` address, as an integer.
        device (torch.device or int, optional): the NPU the stream was created
            on (default: the current device).

    Raises:
        ValueError: ``stream_ptr`` is ``0``/``None``, negative or wider than 64
            bits; ``priority`` or ``is_sync_launch`` was given (a foreign
            stream keeps the properties its owner gave it); the runtime
            rejects the stream on ``device`` (destroyed, forged, or, where the
            runtime checks it as CANN does, created on another device: the
            message then names both devices); or the stream is already
            wrapped for another device.
        TypeError: ``stream_ptr`` is not an integer (``bool`` included), or
            an unknown keyword argument was given.

    .. note:: The stream stays its owner's: this class never destroys it. The
       owner must keep it alive while any ExternalStream wrapping it is used.
       Using one after the owner destroyed the stream is undefined on
       hardware (the address may have been reused); on aclsim it raises.

    .. note:: torch_npu queues launched ops in its task queue
       (``TASK_QUEUE_ENABLE``). Before handing the stream back to the other
       library, call :meth:`fence` so that every op launched so far reached the
       stream before the library's next work (on the native path reading
       :attr:`npu_stream` also does; on the proxy path it does not).

    .. note:: torch_npu's per-stream task queue (``PER_STREAM_QUEUE=1``)
       refuses external streams. There the wrapper warns once and uses the
       proxy implementation (:attr:`native` is ``False``): ops run on a
       torch_npu stream ordered with the foreign one by events, and
       :meth:`fence` orders them both ways.

    Example::

        >>> ptr = other_lib.create_stream()          # an aclrtStream as int
        >>> ext = torch_npu_ipc.ExternalStream(ptr, device="npu:0")
        >>> with torch.npu.stream(ext):
        ...     y = model(x)                         # runs on other_lib's stream
        >>> ext.fence()                              # hand over to other_lib
        >>> other_lib.consume(y.data_ptr(), ptr)
    """

    _ext: _Ext

    def __new__(cls, stream_ptr: int, device: int | str | torch.device | None = None, **kwargs: Any) -> ExternalStream:
        ptr = _validate_ptr(stream_ptr)
        for name in ("priority", "is_sync_launch"):
            if name in kwargs:
                raise ValueError(
                    f"{name} cannot be given for an ExternalStream: the stream's owner created it and "
                    "chose its properties"
                )
        if kwargs:
            raise TypeError(f"ExternalStream() got unexpected keyword argument(s): {', '.join(sorted(kwargs))}")
        torch.npu._lazy_init()
        index = npu_index(device, what="ExternalStream device")
        with torch.npu.device(index):
            # torch_npu sets up a device's streams on their first use with the device current;
            # default_stream(index) from another device raised "Uninitialized default NPU stream".
            torch.npu.default_stream()
        with _LOCK:
            other = _live_wrapper(ptr)
            if other is not None and other._ext.device != index:
                raise ValueError(
                    f"stream {ptr:#x} is already wrapped as an ExternalStream of npu:{other._ext.device}; "
                    f"an aclrtStream belongs to the device it was created on, not npu:{index}"
                )
            _check_usable(ptr, index)
            from_external = _native_entry()
            if from_external is not None:
                triple = tuple(from_external(ptr, index))
                ext = _Ext(ptr=ptr, device=index, triple=triple, native=True)
                _NATIVE_IDS[(triple[1], triple[0])] = ext
            else:
                triple = _PROXIES.get((index, ptr))
                if triple is None:
                    triple = stream_triple(torch_npu.npu.Stream(device=index))
                    _PROXIES[(index, ptr)] = triple
                ext = _Ext(ptr=ptr, device=index, triple=triple, native=False)
            self = torch_npu._C._NPUStreamBase.__new__(
                cls, stream_id=triple[0], device_index=triple[1], device_type=triple[2]
            )
            self._ext = ext
            _LIVE.setdefault(ptr, weakref.WeakSet()).add(self)
            if not ext.native:
                # c10 events (torch.Event, autograd) recorded on the proxy or waited for by it are ordered
                # with the foreign stream while an object wraps it (event_guard.cpp). The finalizer takes no
                # Python lock: it may run inside one, at any allocation.
                _C._note_proxy(index, triple[0], ptr)
                weakref.finalize(self, _C._forget_proxy, index, triple[0], ptr)
            _install_guards()
        if not ext.native:
            idle = self.query()
            self.fence()  # torch work launched from now on follows the owner's work queued so far
            if idle:
                self.synchronize()  # only the fence's events were queued: an idle stream stays idle for the caller
        return self

    def __init__(self, stream_ptr: int, device: int | str | torch.device | None = None, **kwargs: Any) -> None:
        pass  # all done in __new__

    # ------------------------------------------------------------ identity
    @property
    def stream_ptr(self) -> int:
        """The foreign ``aclrtStream`` address (equal to :attr:`npu_stream` on the native path)."""
        return self._ext.ptr

    @property
    def native(self) -> bool:
        """True when torch_npu runs its ops on the foreign stream itself (getStreamFromExternal)."""
        return self._ext.native

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ExternalStream):
            return self._ext.ptr == other._ext.ptr and self._ext.device == other._ext.device
        if not self._ext.native:
            return False  # the proxy is not the foreign stream
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        # torch_npu's base class defines its own __ne__ (stream ids only), which disagreed with __eq__ on the
        # proxy path: a proxy is a pool stream that other streams may share.
        return not self.__eq__(other)

    def __hash__(self) -> int:
        # Same value as torch_npu.npu.Stream.__hash__ of the same stream, without draining the queue.
        return hash((self._ext.ptr, torch.device("npu", self._ext.device)))

    def __repr__(self) -> str:
        kind = "" if self._ext.native else " proxy"
        return f"<torch_npu_ipc.ExternalStream device=npu:{self._ext.device} stream_ptr={self._ext.ptr:#x}{kind}>"

    # ---------------------------------------------------------- operations
    def fence(self) -> None:
        r"""Order the torch side and the owner's side of the stream at this point.

        Afterwards, work the owning library queues on the stream runs after
        every op torch launched on this ExternalStream so far, and ops torch
        launches afterwards run after the work the library queued so far.
        The host does not wait for the device (only for torch_npu's task
        queue to hand its tasks to the runtime).
        """
        raw = _C._drain(self._ext.triple)
        if not self._ext.native:
            _C._ext_order(self._ext.ptr, raw, self._ext.device)  # owner waits for torch
            _C._ext_order(raw, self._ext.ptr, self._ext.device)  # torch waits for owner

    def synchronize(self) -> None:
        r"""Wait until all work queued on the stream, torch's and its owner's, has completed."""
        raw = _C._drain(self._ext.triple)
        _C._ext_synchronize(self._ext.ptr, self._ext.device)
        if not self._ext.native:
            _C._ext_synchronize(raw, self._ext.device)

    def query(self) -> bool:
        r"""Return True when all work queued on the stream, torch's and its owner's, has completed."""
        raw = _C._drain(self._ext.triple)
        done = _C._ext_query(self._ext.ptr, self._ext.device)
        if done and not self._ext.native:
            done = _C._ext_query(raw, self._ext.device)
        return done

    def record_event(self, event: torch_npu.npu.Event | None = None) -> torch_npu.npu.Event:
        r"""Record ``event`` (default: a new ``torch_npu_ipc.Event``) on this stream and return it."""
        _event_arg(event, "record_event", optional=True)
        if event is None:
            from torch_npu_ipc.events import Event

            event = Event()
        event.record(self) if _is_ipc_event_class(event) else record_event_on(event, self._ext)
        return event

    def wait_event(self, event: torch_npu.npu.Event) -> None:
        r"""Make all future work on this stream (torch's and its owner's) wait for ``event``."""
        _event_arg(event, "wait_event", optional=False)
        if _is_ipc_event_class(event):
            event.wait(self)
        else:
            wait_event_on(event, self._ext)

    def wait_stream(self, stream: torch_npu.npu.Stream) -> None:
        r"""Make all future work on this stream wait for the work queued on ``stream`` so far."""
        if not isinstance(stream, torch_npu._C._NPUStreamBase):
            raise TypeError(f"ExternalStream.wait_stream() takes a torch.npu.Stream, got {type(stream).__name__}")
        self.wait_event(stream.record_event())


def _event_arg(event: object, method: str, *, optional: bool) -> None:
    """Raise TypeError unless ``event`` is a torch_npu event (or None, where ``optional``)."""
    if (event is None and optional) or isinstance(event, torch_npu.npu.Event):
        return
    allowed = "a torch.npu.Event or torch_npu_ipc.Event" + (" (or None for a new one)" if optional else "")
    raise TypeError(f"ExternalStream.{method}() takes {allowed}, got {type(event).__name__}")


def _is_ipc_event_class(event: object) -> bool:
    from torch_npu_ipc.events import Event

    return isinstance(event, Event)


def external_of(stream: object) -> _Ext | None:
    """The external stream ``stream`` names, or None for a torch_npu-managed stream.

    Recognizes ExternalStream objects and, on the native path, any
    torch_npu stream object naming the same stream (e.g. what
    ``torch.npu.current_stream()`` returns inside ``torch.npu.stream(ext)``).
    """
    if isinstance(stream, ExternalStream):
        return stream._ext
    if not _NATIVE_IDS:
        return None
    try:
        key = (int(stream.device_index), int(stream.stream_id))  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return None
    return _NATIVE_IDS.get(key)


def _stream_obj(triple: tuple[int, int, int]) -> torch_npu.npu.Stream:
    return torch_npu.npu.Stream(stream_id=triple[0], device_index=triple[1], device_type=triple[2])


def before_record(ext: _Ext) -> None:
    """Before recording an event on ``ext``'s torch stream: on the proxy path, it waits for the owner's work."""
    if not ext.native:
        raw = _C._drain(ext.triple)
        _C._ext_order(raw, ext.ptr, ext.device)


def after_wait(ext: _Ext) -> None:
    """After making ``ext``'s torch stream wait: on the proxy path, the owner's stream waits for it too."""
    if not ext.native:
        raw = _C._drain(ext.triple)
        _C._ext_order(ext.ptr, raw, ext.device)


def record_event_on(event: torch_npu.npu.Event, ext: _Ext) -> None:
    """Record a (non-interprocess) torch_npu event on an external stream."""
    base_record = _patch.unwrapped(torch_npu.npu.Event, "record")
    if event.npu_event != 0 and event.device != torch.device("npu", ext.device):
        raise ValueError(f"the event belongs to {event.device} and cannot be recorded on a stream of npu:{ext.device}")
    if not ext.native:
        before_record(ext)
        base_record(event, _stream_obj(ext.triple))
        return
    if event.npu_event == 0:
        # torch_npu creates its event lazily, on the first record, and refuses
        # to record on an external stream: create it by recording it once on
        # the device's default stream; the record below supersedes that one.
        base_record(event, torch.npu.default_stream(ext.device))
    _C._drain(ext.triple)  # the creating record and every op launched on ext reach the runtime first
    _C._ext_record_event(event.npu_event, ext.ptr, ext.device)


def wait_event_on(event: torch_npu.npu.Event, ext: _Ext) -> None:
    """Make an external stream wait for a (non-interprocess) torch_npu event."""
    if not ext.native:
        _patch.unwrapped(torch_npu.npu.Event, "wait")(event, _stream_obj(ext.triple))
        after_wait(ext)
        return
    ptr = event.npu_event
    if ptr == 0:
        return  # never recorded: nothing to wait for
    # The record may still sit in the task queue of the event's device.
    _C._drain(stream_triple(torch.npu.default_stream(event.device.index)))
    _C._drain(ext.triple)
    _C._ext_wait_event(ext.ptr, ptr, ext.device)


# ---------------------------------------------------------------- guards
_GUARDS_INSTALLED = False
_GUARD = "_torch_npu_ipc_guard"


def _guarded_record_stream(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.Tensor.record_stream`` refusing ExternalStreams."""

    def record_stream(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        # The original takes one argument, `s`; any other call goes to it
        # unchanged, to fail exactly as it does.
        if len(args) + len(kwargs) == 1:
            stream = args[0] if args else kwargs.get("s")
            if external_of(stream) is not None:
                raise RuntimeError(_RECORD_STREAM_MSG)
        return original(self, *args, **kwargs)

    return record_stream


def _guarded_event_method(route: Callable[[torch_npu.npu.Event, _Ext], None]) -> Callable[..., Callable[..., Any]]:
    """``torch_npu.npu.Event.record`` or ``.wait`` taking ExternalStreams.

    torch_npu refuses both on its native external streams, and on the proxy
    path would use the proxy alone, unordered with the owner's work; ``route``
    does what ``ext.record_event(e)`` / ``ext.wait_event(e)`` do. Without a
    stream argument the current stream counts, as in the original.
    """

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def method(self: torch_npu.npu.Event, *args: Any, **kwargs: Any) -> Any:
            # The original takes one optional argument, `stream`; any other call goes to it unchanged.
            if len(args) + len(kwargs) <= 1 and set(kwargs) <= {"stream"}:
                stream = args[0] if args else kwargs.get("stream")
                if stream is None and _NATIVE_IDS:  # the current stream may be a native external one
                    stream = torch.npu.current_stream()
                ext = external_of(stream) if stream is not None else None
                if ext is not None:
                    return route(self, ext)
            return original(self, *args, **kwargs)

        return method

    return make


def _guarded_capture_begin(original: Callable[..., Any]) -> Callable[..., Any]:
    """``NPUGraph.capture_begin`` refusing a native external current stream."""

    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _NATIVE_IDS and external_of(torch.npu.current_stream()) is not None:
            raise RuntimeError(_CAPTURE_MSG)
        return original(self, *args, **kwargs)

    return capture_begin


def _guarded_graph_init(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.npu.graph.__init__`` refusing an ExternalStream as its ``stream``."""
    signature = inspect.signature(original)

    def graph_init(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            stream = signature.bind(self, *args, **kwargs).arguments.get("stream")
        except TypeError:
            stream = None  # the original raises its own TypeError below
        if external_of(stream) is not None:
            raise RuntimeError(_CAPTURE_MSG)
        original(self, *args, **kwargs)

    return graph_init


def _install_guards() -> None:
    """Make torch's and torch_npu's stream functions handle an ExternalStream.

    ``record_stream`` and graph capture on one raise our RuntimeError;
    ``torch.npu.Event.record`` / ``wait`` on one work. Called by the first
    ExternalStream constructed, not at import: a process that never wraps a
    foreign stream keeps torch's and torch_npu's functions untouched.
    torch_npu 2.13 refuses all four itself on its native external streams;
    these wrappers give the reason and the alternative (or do the work), and
    also cover the proxy path (where torch_npu sees an ordinary stream).
    Every other stream, and every call the original would reject, goes to
    the original unchanged (same arguments, same result, same exception).
    Idempotent; the caller holds _LOCK.
    """
    global _GUARDS_INSTALLED
    if _GUARDS_INSTALLED:
        return
    graphs = torch_npu.npu.graphs
    _patch.wrap(torch.Tensor, "record_stream", _GUARD, _guarded_record_stream)
    _patch.wrap(torch_npu.npu.Event, "record", _GUARD, _guarded_event_method(record_event_on))
    _patch.wrap(torch_npu.npu.Event, "wait", _GUARD, _guarded_event_method(wait_event_on))
    _patch.wrap(graphs.NPUGraph, "capture_begin", _GUARD, _guarded_capture_begin)
    _patch.wrap(graphs.graph, "__init__", _GUARD, _guarded_graph_init)
    _GUARDS_INSTALLED = True
