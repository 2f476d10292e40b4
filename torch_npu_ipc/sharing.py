"""Event-synchronized NPU tensor sharing between processes.

A shared tensor travels as a *descriptor*: versioned, checksummed bytes that
name the producer's IPC memory block, a shared reference slot that keeps the
block alive, and an IPC event the receiver's current stream waits on. The
same bytes back the pickle path (torch.multiprocessing queues, pipes,
Process arguments) and :func:`export_tensor` / :func:`import_tensor` for any
other transport (sockets, ZMQ, Ray).
"""

from __future__ import annotations

import atexit
import math
import os
import struct
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Callable
from typing import Any

import torch

from torch_npu_ipc import _C, _patch
from torch_npu_ipc._device import npu_index, stream_triple
from torch_npu_ipc._env import setting

MAGIC = b"TNPUIPC\x00"
VERSION = 2

# Wire codes of the dtypes a descriptor can carry, by name (append only). A name this torch
# lacks keeps its code, as None: a descriptor naming it is refused at decode.
_DTYPE_NAMES: tuple[str, ...] = (
    "float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
    "complex64", "complex128", "uint16", "uint32", "uint64", "complex32", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
)  # fmt: skip
_DTYPES: tuple[torch.dtype | None, ...] = tuple(getattr(torch, name, None) for name in _DTYPE_NAMES)
_DTYPE_CODE = {dt: i for i, dt in enumerate(_DTYPES) if dt is not None}

# producer_pid, device, block_size, storage_offset, storage_nbytes, slot_index, slot_generation,
# dtype, flags, ndim, tensor storage offset, sender's device
_FIXED = struct.Struct("<iqQQQIIBBBqq")
# Flags: the tensor's requires_grad and its lazy conjugate / negative bits (a view's bits are not in
# its memory: a receiver without them would read other values than the sender's).
_REQUIRES_GRAD, _CONJ, _NEG = 1, 2, 4
_MAX_DIMS = 64

_fallback_warned = False
_out_of_events_seen = 0  # _C._out_of_events_sends() at the last fallback send
# Guards the two above: sends from several threads (queue feeders) warn once between them.
_fallback_lock = threading.Lock()


def _pack_str(b: bytes) -> bytes:
    if len(b) > 255:
        raise ValueError("descriptor field too long")
    return bytes([len(b)]) + b


def _check_encodable(t: torch.Tensor) -> None:
    """Refuse what a descriptor cannot carry, before anything is taken for the send."""
    if t.dtype not in _DTYPE_CODE:
        raise TypeError(
            f"cannot share a tensor of dtype {t.dtype}: a descriptor carries "
            + ", ".join(str(dt).removeprefix("torch.") for dt in _DTYPE_CODE)
        )
    if t.dim() > _MAX_DIMS:
        raise ValueError(f"cannot share a tensor of {t.dim()} dimensions: a descriptor carries at most {_MAX_DIMS}")


def _encode(fields: tuple[Any, ...], t: torch.Tensor) -> bytes:
    pid, device, key, block_size, st_off, st_nbytes, table, slot, gen, event = fields
    flags = _REQUIRES_GRAD * t.requires_grad | _CONJ * t.is_conj() | _NEG * t.is_neg()
    body = _FIXED.pack(
        pid, device, block_size, st_off, st_nbytes, slot, gen, _DTYPE_CODE[t.dtype],
        flags, t.dim(), t.storage_offset(), t.device.index,
    )  # fmt: skip
    body += struct.pack(f"<{t.dim()}q{t.dim()}q", *t.size(), *t.stride())
    body += _pack_str(key) + _pack_str(table.encode()) + _pack_str(event)
    head = MAGIC + struct.pack("<HI", VERSION, len(body))
    return head + body + struct.pack("<I", zlib.crc32(head + body))


def _decode(data: bytes) -> tuple[tuple[Any, ...], torch.dtype, list[int], list[int], int, int, int]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"a tensor descriptor is bytes, got {type(data).__name__}")
    data = bytes(data)
    head_len = len(MAGIC) + 6
    if len(data) < head_len + _FIXED.size + 4 or data[: len(MAGIC)] != MAGIC:
        raise ValueError("not a torch_npu_ipc tensor descriptor (bad magic or too short)")
    version, body_len = struct.unpack_from("<HI", data, len(MAGIC))
    if version != VERSION:
        raise ValueError(f"tensor descriptor version {version} is not supported (this torch_npu_ipc reads {VERSION})")
    if len(data) != head_len + body_len + 4:
        raise ValueError("truncated or padded tensor descriptor")
    (crc,) = struct.unpack_from("<I", data, head_len + body_len)
    if zlib.crc32(data[: head_len + body_len]) != crc:
        raise ValueError("corrupted tensor descriptor (checksum mismatch)")
    body = data[head_len : head_len + body_len]
    try:
        pid, device, block_size, st_off, st_nbytes, slot, gen, code, flags, ndim, t_off, sender = _FIXED.unpack_from(
            body, 0
        )
        if ndim > _MAX_DIMS or code >= len(_DTYPES):
            raise ValueError("bad dims or dtype")
        if flags & ~(_REQUIRES_GRAD | _CONJ | _NEG):
            raise ValueError(f"unknown flags {flags:#x}")
        if sender < 0:
            raise ValueError(f"sender's device {sender}")
        if _DTYPES[code] is None:
            raise ValueError(f"dtype torch.{_DTYPE_NAMES[code]} does not exist in this torch {torch.__version__}")
        pos = _FIXED.size
        dims = struct.unpack_from(f"<{2 * ndim}q", body, pos)
        pos += 16 * ndim
        strs = []
        for _ in range(3):
            n = body[pos]
            strs.append(body[pos + 1 : pos + 1 + n])
            if len(strs[-1]) != n:
                raise ValueError("short string")
            pos += 1 + n
        if pos != len(body):
            raise ValueError("trailing bytes")
        table = strs[1].decode("ascii")
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"malformed tensor descriptor: {exc}") from None
    sizes, strides = list(dims[:ndim]), list(dims[ndim:])
    if any(s < 0 for s in sizes) or t_off < 0:
        raise ValueError("malformed tensor descriptor: negative size or offset")
    dtype = _DTYPES[code]
    if flags & _REQUIRES_GRAD and not (dtype.is_floating_point or dtype.is_complex):
        raise ValueError(f"malformed tensor descriptor: requires_grad on a tensor of dtype {dtype}")
    if flags & _CONJ and not dtype.is_complex:
        raise ValueError(f"malformed tensor descriptor: a conjugate view of dtype {dtype}")
    if st_nbytes == 0 and math.prod(sizes) != 0:
        raise ValueError("malformed tensor descriptor: elements in an empty storage")
    fields = (pid, device, strs[0], block_size, st_off, st_nbytes, table, slot, gen, strs[2])
    return fields, dtype, sizes, strides, t_off, flags, sender


def _check_bounds(sizes: list[int], strides: list[int], offset: int, itemsize: int, nbytes: int) -> None:
    if any(s == 0 for s in sizes):
        return
    if any(st < 0 for st in strides):
        raise ValueError("malformed tensor descriptor: negative stride")
    last = offset + sum((s - 1) * st for s, st in zip(sizes, strides, strict=True))
    if (last + 1) * itemsize > nbytes:
        raise ValueError("malformed tensor descriptor: the view exceeds the shared storage")


_record_stream_hooked = False  # set once the wrapper is in place


def _hook_record_stream() -> None:
    """Route ``Tensor.record_stream`` of shared and received memory to the plugin.

    torch_npu's caching allocator ignores memory whose deleter is not its
    own, which sharing installs on a block it sends and on one it receives:
    there ``record_stream`` would silently do nothing and the memory could be
    reused while the stream still reads it. Installed by the first share or
    receive; every other tensor and stream (ExternalStreams included) goes to
    the original unchanged. Idempotent.
    """
    global _record_stream_hooked
    if _record_stream_hooked:  # every send and receive comes here
        return

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def record_stream(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if len(args) + len(kwargs) == 1 and self.device.type == "npu":
                stream = args[0] if args else kwargs.get("s")
                if isinstance(stream, torch.npu.Stream):
                    from torch_npu_ipc.streams import external_of

                    if external_of(stream) is None and _C._record_shared_use(self, stream_triple(stream)):
                        return None
            return original(self, *args, **kwargs)

        return record_stream

    _patch.wrap(torch.Tensor, "record_stream", "_torch_npu_ipc_shared", make)
    _record_stream_hooked = True


_stats_reset_hooked = False  # set once the reset is wrapped (or needs no wrapper)


def _hook_stats_reset() -> None:
    """Keep ``reset_accumulated_memory_stats`` from hiding a segment free from the export-key cache.

    Where torch_npu's allocator has no trace tracker (its PyPI 2.7.1 and
    2.6.0 wheels), the cache notices freed segments by their count, which the
    reset zeroes: a segment freed before the reset and a new one at the same
    address and size would share a key, and a receiver would read the freed
    segment's values. The wrapper closes the cached keys that no shared block
    holds after each reset. Installed by the first export; idempotent.
    """
    global _stats_reset_hooked
    if _stats_reset_hooked:
        return
    import torch_npu

    if hasattr(torch_npu._C, "_npu_resetAccumulatedMemoryStats") and not _C._export_keys_tracked():

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def reset(*args: Any, **kwargs: Any) -> Any:
                try:
                    return original(*args, **kwargs)
                finally:
                    _C._export_keys_forget()

            return reset

        _patch.wrap(torch_npu._C, "_npu_resetAccumulatedMemoryStats", "_torch_npu_ipc_keys_forget", make)
    _stats_reset_hooked = True


def export_tensor(tensor: torch.Tensor) -> bytes:
    r"""Describe an NPU tensor for another process, as bytes for any transport.

    The receiver's current stream will wait for everything this process has
    launched on its current stream so far; this call does not block the host,
    except past the in-flight budget (``TORCH_NPU_IPC_MAX_INFLIGHT``), when
    the device has no IPC event left, or on every send where the NPU or its
    runtime has no IPC events at all: it then synchronizes the current stream
    instead of recording an event, with one ``UserWarning`` per such episode
    (per process, without IPC events).
    Each descriptor is valid for ONE :func:`import_tensor`.

    The receiver gets the tensor's exact layout (sizes, strides, storage
    offset), dtype, ``requires_grad`` and lazy conjugate / negative bits, on
    the device this process holds it on unless it names another.

    Raises:
        ValueError: for a non-NPU tensor, one of more than 64 dimensions, or
            one in a private NPU format (FRACTAL_NZ and the like).
        TypeError: for an unsupported dtype (checked before anything is
            taken for the send: a refused tensor holds no reference slot),
            or a layout other than ``torch.strided`` (sparse tensors).
        RuntimeError: for a non-leaf tensor that requires grad (autograd
            does not cross processes: send ``tensor.detach()``).
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"export_tensor expects a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "npu":
        raise ValueError(f"export_tensor expects an NPU tensor, got a tensor on {tensor.device}")
    if tensor.layout != torch.strided:
        raise TypeError(
            f"export_tensor shares strided tensors; a {tensor.layout} tensor has no single storage: export its "
            "dense parts (for sparse COO: tensor._indices() and tensor._values()), or put it on a "
            "torch.multiprocessing Queue, which sends those parts"
        )
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not "
            "support crossing process boundaries. Call detach() on the tensor before sending it."
        )
    _check_encodable(tensor)
    torch.npu._lazy_init()  # raises in a child forked after the NPU was initialized (see _fork.py)
    _hook_record_stream()
    _hook_stats_reset()
    if tensor.untyped_storage().nbytes() == 0:
        fields = (0, tensor.device.index, b"", 0, 0, 0, "", 0, 0, b"")
        return _encode(fields, tensor)
    fields = _C._share_storage(tensor)
    _note_fallback(fields[-1], tensor.device.index)
    return _encode(fields, tensor)


def import_tensor(data: bytes, device: int | str | torch.device | None = None) -> torch.Tensor:
    r"""Rebuild a tensor from :func:`export_tensor`'s bytes.

    Args:
        data (bytes): the descriptor.
        device: NPU to map it on (default: the index of the device the sender
            held it on). Another device than the memory's maps it with peer access.

    The current stream of the target device waits on the producer's event; the
    host does not block.

    Raises:
        TypeError: if ``data`` is not bytes.
        ValueError: for a forged, truncated or corrupted descriptor.
        RuntimeError: if the producer is gone, or the descriptor was already used.
    """
    fields, dtype, sizes, strides, offset, flags, sender = _decode(data)
    if device is None:
        count = torch.npu.device_count()
        if sender >= count:
            raise ValueError(
                f"the tensor was sent from npu:{sender}, which this process does not have (it sees {count} NPUs); "
                "pass device= to import it on one of them"
            )
        target = sender
    else:
        target = npu_index(device, what="import_tensor device")
    if fields[5] == 0:
        # No memory to map: an empty tensor of the same layout.
        out = torch.empty_strided(sizes, strides, dtype=dtype, device=f"npu:{target}").as_strided(
            sizes, strides, offset
        )
    else:
        _check_bounds(sizes, strides, offset, dtype.itemsize, fields[5])
        _hook_record_stream()
        torch.npu._lazy_init()  # a receiver may not have touched the NPU yet (returns at once after the first call)
        # One call: import (cached), the stream wait, the slot claim, the exact view (target device made current).
        out = _C._rebuild_tensor(fields, target, dtype, sizes, strides, offset)
    # The bits of a lazy view, set on the rebuilt tensor itself: no view op, so it stays a leaf.
    if flags & _CONJ:
        torch._C._set_conj(out, True)
    if flags & _NEG:
        torch._C._set_neg(out, True)
    if flags & _REQUIRES_GRAD:
        out.requires_grad_(True)
    return out


def ipc_collect() -> int:
    r"""Release shared memory that receivers let go, including that of receivers that died.

    Blocks the producer dropped while receivers still held them wait in a
    limbo list; this returns them to the allocator once every receiver
    released them. Returns the number of blocks released. Cheap enough to
    call often: one pass over the reference tables and the limbo list, and
    dead receivers are looked up at most every 50 ms. Sending also collects
    by itself, amortized, when the limbo list grew (those blocks are not
    counted here).
    """
    return int(_C._ipc_collect())


def sharing_stats() -> dict[str, Any]:
    r"""Return the counters of this process's sharing.

    Returns:
        dict: ``inflight_events`` (sends whose event a receiver has not
        claimed yet), ``limbo_blocks`` (blocks this process dropped while
        receivers still held them), ``live_slots`` (tensors this process sent
        that are not released yet, received or not), ``live_slots_self`` (those
        of them this process received itself), ``unreceived_slots`` (those of
        them nobody received yet), ``releasing_slots`` (those of them another
        process dropped, its release still on its way: its stream had not run
        past the drop yet), ``fenced_slots`` (those of them another process
        still holds and fenced since this process asked, at its exit: the
        work queued on them then has run), ``unreceived_forwards`` (tensors
        this process received and sent on, with its event, that nobody
        received yet: counted in the original producer's ``live_slots``, and
        waited for at this process's exit like its own sends),
        ``fallback_syncs`` (sends that
        synchronized instead of recording an event: over the in-flight budget,
        ``out_of_events_sends`` of them because the device had no IPC event
        left, or ``no_ipc_event_sends`` because the NPU or its runtime has no
        IPC events at all), ``in_fallback`` (the latest send synchronized; it
        changes only at the next send),
        ``release_syncs`` (times this process, as a receiver, gave tensors back
        by synchronizing a stream because it could not record a fence event
        on it: the device was out of events, or torch_npu's task queue failed),
        and ``out_of_memory_waits`` (allocations that found the device with
        less memory left than receivers' releases on their way would return,
        and waited for them; counted also when no block came back in time).
    """
    return dict(_C._sharing_stats())


def _note_fallback(event_handle: bytes, device: int) -> None:
    global _fallback_warned, _out_of_events_seen
    if event_handle:
        _fallback_warned = False
        return
    with _fallback_lock:
        out_of_events = _C._out_of_events_sends()
        device_had_none = out_of_events != _out_of_events_seen
        _out_of_events_seen = out_of_events
        if _fallback_warned:
            return
        _fallback_warned = True
    budget = _C._inflight_budget()
    unsupported = _C._ipc_event_unsupported_reason(device)
    if unsupported:
        msg = (
            f"torch_npu_ipc: npu:{device} cannot share tensors with events: {unsupported}; every send "
            "synchronizes the producer's stream instead (the receiver needs no wait), as torch_npu's own "
            "sharing does there"
        )
    elif device_had_none:
        msg = (
            f"torch_npu_ipc: npu:{device} has no IPC event left (the runtime's limit; CANN's is 65,536 per "
            "device); synchronizing the producer's stream instead of recording events until some are freed "
            "(drop the interprocess Events you no longer need)"
        )
    elif budget == 0:
        msg = (
            "torch_npu_ipc: TORCH_NPU_IPC_MAX_INFLIGHT=0: every send synchronizes the producer's stream "
            "instead of recording an event"
        )
    else:
        msg = (
            f"torch_npu_ipc: {budget} shared tensors are waiting for their receivers; synchronizing the "
            "producer's stream instead of recording events until receivers catch up "
            "(raise TORCH_NPU_IPC_MAX_INFLIGHT or receive faster)"
        )
    warnings.warn(msg, stacklevel=3)


# --------------------------------------------------------------- pickling
def rebuild_npu_tensor(data: bytes) -> torch.Tensor:
    """Unpickle an NPU tensor sent by :func:`reduce_tensor`."""
    return import_tensor(data)


def rebuild_npu_parameter(data: bytes) -> torch.nn.Parameter:
    """Unpickle an ``nn.Parameter`` on an NPU: a Parameter again, as torch.multiprocessing rebuilds CUDA ones."""
    t = import_tensor(data)
    return torch.nn.Parameter(t, requires_grad=t.requires_grad)


def rebuild_npu_storage(data: bytes) -> torch.UntypedStorage:
    """Unpickle an NPU storage sent by :func:`reduce_storage`."""
    return import_tensor(data).untyped_storage()


def reduce_npu_tensor(tensor: torch.Tensor) -> tuple[Callable[..., Any], tuple[bytes]]:
    """Pickle an NPU tensor as an event-synchronized descriptor (an ``nn.Parameter`` stays one)."""
    torch.utils.hooks.warn_if_has_hooks(tensor)
    data = export_tensor(tensor)
    if type(tensor) is torch.nn.Parameter:
        return rebuild_npu_parameter, (data,)
    return rebuild_npu_tensor, (data,)


def reduce_npu_storage(storage: torch.UntypedStorage) -> tuple[Callable[..., Any], tuple[bytes]]:
    """Pickle an NPU storage as an event-synchronized descriptor."""
    t = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (storage.nbytes(),), (1,))
    return rebuild_npu_storage, (export_tensor(t),)


def safe_globals() -> list[Callable[..., Any]]:
    """The rebuild functions a restricted unpickler must allow to receive NPU tensors and events.

    Example::

        >>> class Safe(pickle.Unpickler):
        ...     def find_class(self, module, name):
        ...         for fn in torch_npu_ipc.safe_globals():
        ...             if (fn.__module__, fn.__name__) == (module, name):
        ...                 return fn
        ...         raise pickle.UnpicklingError(f"{module}.{name} is not allowed")
    """
    from torch_npu_ipc.reductions import rebuild_event

    return [rebuild_npu_tensor, rebuild_npu_parameter, rebuild_npu_storage, rebuild_event]


# How long an exiting producer waits for what is on its way: receivers'
# releases and descriptors not received yet (TORCH_NPU_IPC_EXIT_GRACE_MS, read
# at import; a program may also set this).
EXIT_GRACE_S = setting("TORCH_NPU_IPC_EXIT_GRACE_MS") / 1000
# How long it waits at most for receivers to fence the tensors they still hold
# (TORCH_NPU_IPC_EXIT_HELD_GRACE_MS): a receiver fences them once the work its
# streams had queued on them has run.
EXIT_HELD_GRACE_S = setting("TORCH_NPU_IPC_EXIT_HELD_GRACE_MS") / 1000
# A forked child inherits this module, and its parent's tables: only the
# process that imported it waits for (and warns about) the tensors it shared.
_IMPORTED_BY = os.getpid()


def _exit_census() -> tuple[int, int, int, int]:
    # (sends on their way: not received yet, or dropped and being released;
    # sends other processes hold and have not fenced; sends they hold;
    # forwards not received yet), after forgetting receivers that exited
    # before their release reached us. A forward's memory is the original
    # producer's, but its receiver opens this process's event.
    _C._ipc_collect(force=True)
    st = _C._sharing_stats()
    pending = int(st["unreceived_slots"] + st["releasing_slots"])
    held = int(st["live_slots"] - st["live_slots_self"]) - pending
    return pending, held - int(st["fenced_slots"]), held, int(st["unreceived_forwards"])


def _exit_warning(held: int, pending: int) -> str:
    # What the exit says about the tensors it shared that are still out: how
    # many receivers hold, how many nobody received (or released) yet, and
    # the usual cause of each with its remedy.
    text = (
        f"torch_npu_ipc: warning: this process is exiting while {held + pending} tensor(s) it shared are still "
        f"held by other processes ({held}) or not yet received or released ({pending}). Their memory belongs to "
        "this process: on NPU hardware it is released with it, so receivers must not use those tensors any more."
    )
    if held:
        text += (
            " Held: keep this process alive until its receivers are done with them (for a DataLoader's last "
            "batch, still bound when non-persistent workers end: persistent_workers=True, or drop the batch first)."
        )
    if pending:
        text += (
            " Not received: tensors nobody will take (a loop left early) cost this exit a wait of "
            f"TORCH_NPU_IPC_EXIT_GRACE_MS ({round(EXIT_GRACE_S * 1000)} ms here): set it to 0 for such programs."
        )
    return text + " See docs/sharing.md, When a peer dies."


@atexit.register
def _warn_if_shared_tensors_alive() -> None:
    # A receiver's release reaches the producer after its stream ran past the
    # drop (see "Releaser" in docs/sharing.md): a receiver that dropped a
    # tensor and then told this process to exit is still releasing it. Wait
    # for those releases, and for descriptors still in a queue, up to
    # EXIT_GRACE_S; the memory goes with this process, so this also keeps it
    # alive for receivers' work still reading it. A tensor a receiver still
    # holds may be read by work its stream has queued (a DataLoader's last
    # batch, still computing): receivers are asked to fence those, and the
    # exit waits for their answers up to EXIT_HELD_GRACE_S.
    # As a receiver: producers that end from now on are most likely stopped by this exit
    # (multiprocessing terminates daemonic children after atexit: a DataLoader's persistent
    # workers, a Pool never closed), and what this process holds dies with it: no warning.
    # (An atomic store: nothing here can fail, finalized runtime or not.)
    _C._quiet_vanished_producers()
    if os.getpid() != _IMPORTED_BY:
        return
    try:
        _C._request_exit_fence()
        start = time.monotonic()
        pending, unfenced, held, forwards = _exit_census()
        while True:
            waited = time.monotonic() - start
            on_their_way = pending + forwards
            if not ((on_their_way and waited < EXIT_GRACE_S) or (unfenced and waited < EXIT_HELD_GRACE_S)):
                break
            time.sleep(0.005)
            pending, unfenced, held, forwards = _exit_census()
        live = pending + held
        _C._mark_exit_waited()  # receivers that find this process gone leave the warning to it
    except Exception:  # the runtime may already be finalized
        return
    if live:
        print(_exit_warning(held, pending), file=sys.stderr)
    if forwards:
        try:
            forwards = _C._withdraw_unreceived_forwards()
        except Exception:
            return
    if forwards:
        print(
            f"torch_npu_ipc: warning: this process is exiting while {forwards} tensor(s) it forwarded are not yet "
            "received. The event that orders them after this process's work goes with it: they are withdrawn, and "
            "their receivers will get an error naming this process (see docs/sharing.md, Forwarding).",
            file=sys.stderr,
        )
