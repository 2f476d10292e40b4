"""torch_npu_ipc: interprocess synchronization for PyTorch on Ascend NPUs.

What ``torch.cuda`` offers CUDA users, for torch_npu: interprocess events,
event-synchronized tensor sharing between processes, event-synchronized
cross-device copies, and external streams.

Import this package before ``torch``: on a machine without CANN it runs
torch_npu on aclsim, the bundled CPU simulator of the CANN runtime.
"""

from __future__ import annotations

import atexit

from torch_npu_ipc._env import check_core_env
from torch_npu_ipc._runtime import select_runtime

check_core_env()
RUNTIME: str = select_runtime()

import torch  # noqa: E402,F401
import torch_npu  # noqa: E402,F401

from torch_npu_ipc import _C, _fork, copies, event_guard, reductions  # noqa: E402
from torch_npu_ipc.events import Event  # noqa: E402
from torch_npu_ipc.sharing import export_tensor, import_tensor, ipc_collect, safe_globals, sharing_stats  # noqa: E402
from torch_npu_ipc.streams import ExternalStream  # noqa: E402

__version__ = "0.1.0"

reductions.register()
copies.install_from_env()
event_guard.install_from_env()
reductions.register_tensors()
_fork.install()
# Names the exiting thread: once the interpreter finalizes, daemon threads
# coming back from plugin calls park instead of aborting the exit (csrc/plugin/gil.h).
atexit.register(_C._mark_interpreter_exiting)

__all__ = [
    "RUNTIME",
    "Event",
    "ExternalStream",
    "__version__",
    "export_tensor",
    "import_tensor",
    "ipc_collect",
    "safe_globals",
    "sharing_stats",
]
