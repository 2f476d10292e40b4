"""Simulated device work on raw streams."""

from __future__ import annotations

import ctypes
import math

from aclsim._env import runtime


def sleep(stream_ptr: int, seconds: float) -> None:
    """Enqueue ``seconds`` of simulated device work on a raw ``aclrtStream``.

    The call returns at once; the stream is busy for ``seconds`` once the work
    before it ran. Use ``torch.npu.current_stream().npu_stream`` for the
    pointer of a torch_npu stream. The work goes straight to the runtime, so
    anything torch_npu still holds in its task queue for that stream is
    ordered after it; call it before launching the work it should delay.

    Raises:
        TypeError, ValueError: for a bad pointer or duration.
        RuntimeError: when the runtime rejects the stream.
    """
    if isinstance(stream_ptr, bool) or not isinstance(stream_ptr, int):
        raise TypeError(f"stream_ptr must be an int, got {type(stream_ptr).__name__}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number, got {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be finite and >= 0, got {seconds}")
    if stream_ptr < 0:
        raise ValueError(f"stream_ptr must be >= 0, got {stream_ptr}")
    rt = runtime()
    rt.aclsimStreamSleep.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    rt.aclsimStreamSleep.restype = ctypes.c_int
    rc = rt.aclsimStreamSleep(ctypes.c_void_p(stream_ptr or None), ctypes.c_uint64(int(seconds * 1e9)))
    if rc != 0:
        rt.aclGetRecentErrMsg.restype = ctypes.c_char_p
        msg = rt.aclGetRecentErrMsg()
        raise RuntimeError(f"aclsim.sleep failed with ACL error {rc}: {msg.decode() if msg else 'unknown'}")
