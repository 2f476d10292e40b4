"""Wrapping torch's and torch_npu's Python functions: one lock, marked wrappers, the original kept.

Several modules wrap the same function (``Tensor.record_stream`` is wrapped
by sharing and by external streams): each wrap reads the function and
replaces it under one lock, so that two wrappers made from the same original
never lose one. Every wrapper carries a mark (to wrap once) and the function
it wraps (``_torch_npu_ipc_original``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()

ORIGINAL = "_torch_npu_ipc_original"


def wrap(owner: Any, name: str, mark: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace ``owner.<name>`` by ``make(original)`` unless a wrapper marked ``mark`` is already there.

    The new function takes the original's name and docstring
    (``functools.wraps``), the attribute ``mark`` set to True, and the
    original as ``_torch_npu_ipc_original``.

    Returns:
        bool: True if it wrapped the function now, False if it was wrapped before.
    """
    with _LOCK:
        original = getattr(owner, name)
        if getattr(original, mark, False):
            return False
        wrapper = functools.wraps(original)(make(original))
        setattr(wrapper, mark, True)
        setattr(wrapper, ORIGINAL, original)
        setattr(owner, name, wrapper)
        return True


def unwrapped(owner: Any, name: str) -> Callable[..., Any]:
    """Return ``owner.<name>`` as it was before any of the plugin's wrappers."""
    function = getattr(owner, name)
    while hasattr(function, ORIGINAL):
        function = getattr(function, ORIGINAL)
    return function
