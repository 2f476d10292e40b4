"""The package's integer settings from the environment, checked at import.

The C++ core reads most of them once, at first use, where a bad value could
only be ignored; here a bad value raises ``ValueError`` naming the variable.
"""

from __future__ import annotations

import os
import re

# name -> (default, largest value, what it sets), all non-negative integers. The largest values
# keep a duration, converted to nanoseconds past the current time, far from overflowing (about
# 31 years each); csrc/plugin's env_int callers clamp to the same bounds.
CORE_SETTINGS: dict[str, tuple[int, int, str]] = {
    "TORCH_NPU_IPC_MAX_INFLIGHT": (
        1000,
        10**9,
        "sends whose event receivers have not claimed yet, before sends synchronize",
    ),
    "TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S": (600, 10**9, "seconds a sent tensor waits for its receiver"),
    "TORCH_NPU_IPC_EXPORT_GRACE_MS": (5000, 10**12, "milliseconds an exported event outlives its Event object"),
    "TORCH_NPU_IPC_KEPT_IMPORTS": (
        64,
        4096,
        "imported memory blocks a receiver keeps mapped after their last tensor died",
    ),
    # Read by torch_npu_ipc.sharing (Python), not by the core.
    "TORCH_NPU_IPC_EXIT_GRACE_MS": (
        2000,
        10**9,
        "milliseconds an exiting producer waits for releases on their way and tensors not received yet",
    ),
    "TORCH_NPU_IPC_EXIT_HELD_GRACE_MS": (
        2000,
        10**9,
        "milliseconds an exiting producer waits at most for receivers to fence the tensors they still hold",
    ),
}


def check_core_env() -> None:
    """Raise ``ValueError`` for a setting of :data:`CORE_SETTINGS` that is not an integer in its range.

    Unset or empty means the default. Only ASCII digits are accepted, as the
    core parses them (no sign, no spaces).
    """
    for name, (default, largest, what) in CORE_SETTINGS.items():
        value = os.environ.get(name, "")
        if not value:
            continue
        if not re.fullmatch(r"[0-9]+", value) or int(value) > largest:
            raise ValueError(
                f"{name} must be an integer from 0 to {largest} ({what}; default {default}), got {value!r}"
            )


def setting(name: str) -> int:
    """The value of :data:`CORE_SETTINGS` entry ``name``: the environment's, or the default when unset or empty.

    :func:`check_core_env` has validated it at import.
    """
    value = os.environ.get(name, "")
    return int(value) if value else CORE_SETTINGS[name][0]
