"""Settings the C++ core reads from the environment, checked at import.

The core reads them once, at first use, where a bad value could only be
ignored; here a bad value raises ``ValueError`` naming the variable.
"""

from __future__ import annotations

import os

# name -> (default, what it sets), all non-negative integers.
CORE_SETTINGS: dict[str, tuple[int, str]] = {
    "TORCH_NPU_IPC_MAX_INFLIGHT": (1000, "sends whose event receivers have not claimed yet, before sends synchronize"),
    "TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S": (600, "seconds a sent tensor waits for its receiver"),
    "TORCH_NPU_IPC_EXPORT_GRACE_MS": (5000, "milliseconds an exported event outlives its Event object"),
}


def check_core_env() -> None:
    """Raise ``ValueError`` for a setting of :data:`CORE_SETTINGS` that is not a non-negative integer.

    Unset or empty means the default.
    """
    for name, (default, what) in CORE_SETTINGS.items():
        value = os.environ.get(name, "")
        if value.strip() and not value.strip().isdigit():
            raise ValueError(f"{name} must be a non-negative integer ({what}; default {default}), got {value!r}")
