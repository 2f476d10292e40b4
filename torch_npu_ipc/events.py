"""Interprocess events: ``torch_npu_ipc.Event``, a drop-in ``torch_npu.npu.Event`` with IPC.

With ``interprocess=True`` the event is an ACL IPC event owned by this
package's C++ core, whatever the installed torch_npu supports natively.
Without it, the event is exactly torch_npu's own.
"""

from __future__ import annotations

import operator
import threading
from typing import Any

import torch
import torch_npu

from torch_npu_ipc import _C
from torch_npu_ipc import streams as _streams
from torch_npu_ipc._device import npu_index, stream_triple, task_queue_on

IPC_HANDLE_SIZE = 64


def _stream_arg(stream: Any, method: str) -> torch_npu.npu.Stream:
    """``stream``, or the current stream for None; a TypeError names anything else."""
    if stream is None:
        return torch.npu.current_stream()
    if not isinstance(stream, torch_npu._C._NPUStreamBase):
        raise TypeError(
            f"Event.{method}() takes a torch.npu.Stream (or None for the current one), got {type(stream).__name__}"
        )
    return stream


def _refuse_forked_child() -> None:
    """Raise torch_npu's "Cannot re-initialize NPU in forked subprocess" in a child forked after NPU init.

    An interprocess Event inherited through a fork (given an explicit stream, no call reaches torch_npu)
    would record on the parent's runtime state: see ``_fork.py``. Returns at once otherwise.
    """
    torch.npu._lazy_init()


def _flag(value: Any, name: str, where: str) -> bool:
    """``value`` as a bool: a bool or an int (torch.cuda.Event takes 0 / 1 too); a TypeError names anything else."""
    if isinstance(value, bool):
        return value
    try:
        return bool(operator.index(value))
    except TypeError:
        raise TypeError(f"{where}: {name} must be a bool, got {type(value).__name__}") from None


class Event(torch_npu.npu.Event):
    r"""Wrapper around an NPU event, shareable between processes.

    Args:
        enable_timing (bool, optional): the event measures time (default: ``False``).
            Not allowed together with ``interprocess``.
        blocking (bool, optional): for an interprocess event, :meth:`wait` also
            blocks the host until the recorded work completed; for other events
            it is handed to torch_npu's Event, whose :meth:`wait` does not block
            the host (default: ``False``).
        interprocess (bool, optional): the event can be shared between processes
            (default: ``False``).
        external (bool, optional): accepted for ``torch.cuda.Event``'s signature;
            only ``False``: torch_npu has no external graph-capture events
            (default: ``False``).

    An interprocess event is created lazily, on the device of the stream that
    first records it, or, if its handle is asked for first, on the device that
    was current when the Event object was constructed (not the device current
    in whichever thread, e.g. a multiprocessing feeder thread, asks for the
    handle).

    Example::

        >>> e = torch_npu_ipc.Event(interprocess=True)
        >>> e.record()
        >>> queue.put(e)                      # or e.ipc_handle() bytes
        >>> # in the other process:
        >>> e = queue.get(); e.wait()         # current stream waits, host does not block
    """

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False
    ) -> Event:
        enable_timing = _flag(enable_timing, "enable_timing", "Event()")
        blocking = _flag(blocking, "blocking", "Event()")
        interprocess = _flag(interprocess, "interprocess", "Event()")
        external = _flag(external, "external", "Event()")
        if external:
            raise ValueError(
                "external=True (record and wait nodes when captured in a graph, as torch.cuda.Event has) is not "
                "supported: torch_npu's events have no such mode"
            )
        if interprocess and enable_timing:
            raise ValueError(
                "an interprocess Event cannot have enable_timing=True (CANN IPC events record no timestamps)"
            )
        # The torch_npu base object is used only by non-interprocess events.
        self = super().__new__(cls, enable_timing=enable_timing, blocking=blocking, interprocess=False)
        self._interprocess = bool(interprocess)
        self._blocking = bool(blocking)
        self._ipc: Any = None
        # Lazy creation may race: a queue's feeder thread asks for the handle
        # while the owner records. One ACL event per Event, whoever comes first.
        self._create_lock = threading.Lock() if interprocess else None
        if interprocess:
            torch.npu._lazy_init()
        self._home_device = torch.npu.current_device() if interprocess else None
        return self

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False
    ) -> None:
        super().__init__()

    # ------------------------------------------------------------------ IPC
    @classmethod
    def from_ipc_handle(cls, device: int | str | torch.device, handle: bytes, *, blocking: bool = False) -> Event:
        r"""Open an event that another process exported with :meth:`ipc_handle`.

        Args:
            device: the NPU to open it on (int, ``"npu:k"`` or ``torch.device``).
            handle (bytes): the 64 bytes returned by :meth:`ipc_handle`.
            blocking (bool, optional): as for the constructor; keyword only, an
                extension of ``torch.cuda.Event.from_ipc_handle``. An Event sent
                through a queue arrives with its sender's flag (default: ``False``).

        Raises:
            TypeError: if ``handle`` is not bytes.
            ValueError: if ``handle`` is not 64 bytes or ``device`` is not an NPU.
            RuntimeError: if the runtime rejects the handle (forged, or its
                exporter already destroyed the event).
        """
        if not isinstance(handle, (bytes, bytearray, memoryview)):
            raise TypeError(f"handle must be bytes, got {type(handle).__name__}")
        handle = bytes(handle)
        blocking = _flag(blocking, "blocking", "Event.from_ipc_handle()")
        if len(handle) != IPC_HANDLE_SIZE:
            raise ValueError(f"an IPC event handle has {IPC_HANDLE_SIZE} bytes, got {len(handle)}")
        index = npu_index(device, what="from_ipc_handle device")
        self = cls(blocking=blocking, interprocess=True)
        self._home_device = index
        self._ipc = _C._IpcEvent.open(index, handle)
        return self

    def ipc_handle(self) -> bytes:
        r"""Return the 64-byte IPC handle of this event (creating the event if needed).

        Raises:
            RuntimeError: if the event is not interprocess.
        """
        if not self._interprocess:
            raise RuntimeError("ipc_handle() needs an Event created with interprocess=True")
        _refuse_forked_child()
        return self._ensure().handle()

    # ----------------------------------------------------------- operations
    def record(self, stream: torch.npu.Stream | None = None) -> None:
        r"""Record the event on ``stream`` (default: the current stream)."""
        stream = _stream_arg(stream, "record")
        ext = _streams.external_of(stream)  # an ExternalStream: torch_npu refuses to record on it
        if not self._interprocess:
            if ext is not None:
                return _streams.record_event_on(self, ext)
            return super().record(stream)
        _refuse_forked_child()
        if ext is not None:
            _streams.before_record(ext)
        self._ensure(stream.device_index).record(stream_triple(stream))
        return None

    def wait(self, stream: torch.npu.Stream | None = None) -> None:
        r"""Make all future work on ``stream`` (default: current) wait for this event.

        The host does not block unless the event was created with ``blocking=True``.
        A wait on a never-recorded event does nothing.
        """
        stream = _stream_arg(stream, "wait")
        ext = _streams.external_of(stream)  # an ExternalStream: torch_npu refuses to wait on it
        if not self._interprocess:
            if ext is not None:
                return _streams.wait_event_on(self, ext)
            super().wait(stream)
            if self.npu_event != 0 and self.device != stream.device and task_queue_on():
                # torch_npu queues the wait behind the waiting device's tasks and destroys the event
                # behind its own device's: an Event dropped right after a cross-device wait (as
                # torch.npu.Stream.wait_stream drops its own) was destroyed before the wait reached the
                # runtime ("invalid event handle"). Hand the wait to the runtime now (no device sync).
                _C._drain(stream_triple(stream))
            return None
        _refuse_forked_child()
        if self._ipc is None:
            return None  # never recorded anywhere: nothing to wait for
        self._ipc.wait(stream_triple(stream))
        if ext is not None:
            _streams.after_wait(ext)
        if self._blocking:
            self._ipc.synchronize()
        return None

    def query(self) -> bool:
        r"""Return True when all work captured by the latest record has completed."""
        if not self._interprocess:
            return super().query()
        _refuse_forked_child()
        return True if self._ipc is None else self._ipc.query()

    def synchronize(self) -> None:
        r"""Block the host until the latest record's work has completed."""
        if not self._interprocess:
            return super().synchronize()
        _refuse_forked_child()
        if self._ipc is not None:
            self._ipc.synchronize()
        return None

    def elapsed_time(self, end_event: torch_npu.npu.Event) -> float:
        r"""Milliseconds between this event and ``end_event`` (timing events only)."""
        if self._interprocess or getattr(end_event, "_interprocess", False):
            raise RuntimeError("elapsed_time() is not available on interprocess events (they record no timestamps)")
        return super().elapsed_time(end_event)

    # ------------------------------------------------------------ properties
    @property
    def interprocess(self) -> bool:
        """True for an event that can be shared between processes."""
        return self._interprocess

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        """The NPU the event lives on."""
        if not self._interprocess:
            return super().device
        index = self._ipc.device if self._ipc is not None else self._home_device
        return torch.device("npu", index)

    @property
    def npu_event(self) -> int:  # type: ignore[override]
        """The raw ``aclrtEvent`` pointer (0 before the event exists)."""
        if not self._interprocess:
            return super().npu_event
        return 0 if self._ipc is None else self._ipc.ptr

    def _ensure(self, device: int | None = None) -> Any:
        """The ACL event, created on ``device`` (default: the home device) if there is none yet."""
        ipc = self._ipc
        if ipc is None:
            with self._create_lock:
                if self._ipc is None:
                    self._ipc = _C._IpcEvent.create(self._home_device if device is None else device)
                ipc = self._ipc
        return ipc

    def __repr__(self) -> str:
        kind = "interprocess " if self._interprocess else ""
        ptr = self.npu_event
        return f"<torch_npu_ipc.Event {kind}{ptr:#x}>" if ptr else f"<torch_npu_ipc.Event {kind}uninitialized>"
