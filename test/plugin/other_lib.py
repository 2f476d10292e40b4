"""A foreign ACL user for the external-stream tests: its own streams and memory, raw ctypes calls.

It creates streams on a helper thread, so the test thread's current device,
which torch_npu owns, does not change, and queues its own work on them
(``aclrtMemcpyAsync``; simulated device time with ``aclsim.sleep``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from helpers import T, on_device_thread

D2D, H2D, D2H = 3, 1, 2  # aclrtMemcpyKind


class OtherLib:
    """A foreign ACL user: its own streams and memory, raw ctypes calls."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libascendcl.so")
        vp, pvp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        sigs = {
            "aclrtSetDevice": [ctypes.c_int32],
            "aclrtCreateStream": [pvp],
            "aclrtDestroyStream": [vp],
            "aclrtSynchronizeStream": [vp],
            "aclrtMalloc": [pvp, ctypes.c_size_t, ctypes.c_int],
            "aclrtFree": [vp],
            "aclrtMemcpy": [vp, ctypes.c_size_t, vp, ctypes.c_size_t, ctypes.c_int],
            "aclrtMemcpyAsync": [vp, ctypes.c_size_t, vp, ctypes.c_size_t, ctypes.c_int, vp],
        }
        for name, args in sigs.items():
            getattr(lib, name).argtypes = args
            getattr(lib, name).restype = ctypes.c_int
        self.lib = lib
        self.stream_device: dict[int, int] = {}  # as a library would remember: each stream's device

    def _on_device(self, device: int, fn: Callable[[], T]) -> T:
        return on_device_thread(self.lib.aclrtSetDevice, device, fn)

    def create_stream(self, device: int) -> int:
        def make() -> int:
            s = ctypes.c_void_p()
            assert self.lib.aclrtCreateStream(ctypes.byref(s)) == 0
            return s.value or 0

        ptr = self._on_device(device, make)
        self.stream_device[ptr] = device
        return ptr

    def destroy_stream(self, ptr: int) -> None:
        """Synchronize and destroy, with the stream's device current (CANN refuses it otherwise)."""

        def destroy() -> int:
            assert self.lib.aclrtSynchronizeStream(ptr) == 0
            return self.lib.aclrtDestroyStream(ptr)

        assert self._on_device(self.stream_device.pop(ptr), destroy) == 0

    def device_buffer(self, device: int, data: bytes) -> int:
        def make() -> int:
            p = ctypes.c_void_p()
            assert self.lib.aclrtMalloc(ctypes.byref(p), len(data), 0) == 0
            buf = ctypes.create_string_buffer(data, len(data))
            assert self.lib.aclrtMemcpy(p, len(data), buf, len(data), H2D) == 0
            return p.value or 0

        return self._on_device(device, make)

    def copy_async(self, dst: int, src: int, n: int, kind: int, stream: int) -> None:
        """Queue a copy on ``stream``, with the stream's device current (CANN refuses it otherwise)."""
        rc = self._on_device(
            self.stream_device[stream], lambda: self.lib.aclrtMemcpyAsync(dst, n, src, n, kind, stream)
        )
        assert rc == 0, f"aclrtMemcpyAsync failed with ACL error {rc}"

    def sync(self, stream: int) -> None:
        assert self.lib.aclrtSynchronizeStream(stream) == 0
