"""``python -m torch_npu_ipc doctor``: what runs where, and why."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import torch
import torch_npu

import torch_npu_ipc
from torch_npu_ipc import _C


def _native_features() -> dict[str, bool]:
    try:  # torch_npu 2.6.0 and older have no torch_npu.multiprocessing
        import torch_npu.multiprocessing.reductions as native_reductions
    except ImportError:
        native_reductions = None

    return {
        "Event IPC (ipc_handle / from_ipc_handle)": hasattr(torch_npu.npu.Event, "ipc_handle"),
        "ExternalStream": hasattr(torch_npu.npu, "ExternalStream"),
        "tensor IPC (_share_npu_)": hasattr(torch.UntypedStorage, "_share_npu_")
        and hasattr(native_reductions, "rebuild_npu_tensor"),
    }


# torch_npu releases with a bug of their own that the plugin's features run into (2.6.0 measured
# here; 2.6.0.post1 predates the upstream fix, 2.6.0.post2 has it):
# (releases, applies without the task queue only, what happens, the fix).
_KNOWN_BUGS: tuple[tuple[frozenset[str], bool, str, str], ...] = (
    (
        frozenset({"2.6.0", "2.6.0.post1"}),
        True,
        "freeing a tensor that recorded a stream use (record_stream, or a cross-device copy through the "
        "plugin's hook) while another device is current leaves torch_npu's cached device out of step with "
        "ACL's, and the next op on that device fails with ACL error 107003 'stream is not in current ctx'",
        "upgrade to torch_npu 2.6.0.post2 or newer (fixed upstream), keep the task queue on "
        "(TASK_QUEUE_ENABLE=1|2), or set TORCH_NPU_IPC_COPIES=0",
    ),
)


def known_torch_npu_bugs(version: str, task_queue: bool) -> list[str]:
    """The known bugs of torch_npu ``version`` that matter with the task queue on or off, with their fix."""
    return [f"{what}: {fix}" for releases, without_queue, what, fix in _KNOWN_BUGS
            if version in releases and not (without_queue and task_queue)]  # fmt: skip


def report() -> list[str]:
    """Return the doctor's report, one line per fact."""
    lines = [
        f"torch_npu_ipc  {torch_npu_ipc.__version__}",
        f"python         {sys.version.split()[0]}",
        f"torch          {torch.__version__}",
        f"torch_npu      {getattr(torch_npu, '__version__', '?')}",
    ]
    if torch_npu_ipc.RUNTIME == "aclsim":
        lines.append(f"runtime        aclsim (CPU simulator of CANN), {os.environ.get('ACLSIM_SOC', '?')}")
    else:
        lines.append(f"runtime        CANN {torch_npu.npu.utils.get_cann_version()}")
    lines.append(f"libascendcl    {_C._acl_library_path()}")
    lines.append(f"devices        {torch.npu.device_count()}")
    lines.append("native features of this torch_npu:")
    for name, present in _native_features().items():
        lines.append(f"  {name:<42} {'present' if present else 'absent'}")
    reason = _C._ipc_event_unsupported_reason(torch.npu.current_device()) if torch.npu.device_count() else "no NPU"
    lines.append(f"IPC events     {'supported' if not reason else 'UNSUPPORTED: ' + reason}")
    lines.append("paths used by torch_npu_ipc:")
    lines.append(
        "  interprocess Event                         "
        + (
            "plugin (ACL IPC events, own lifetime manager)"
            if not reason
            else "unavailable: " + reason + " (Event() without interprocess=True still works)"
        )
    )
    lines.append(
        "  tensor sharing                             "
        + (
            "plugin (IPC memory + IPC events)"
            if not reason
            else "plugin (IPC memory); no IPC events, so each send synchronizes the producer's stream: " + reason
        )
    )
    lines.append(f"  in-flight event budget                     {_C._inflight_budget()}")
    if not reason:
        keys = (
            "closed at each segment free (allocator trace tracker)"
            if _C._export_keys_tracked()
            else "closed when the freed-segment count moves, and after reset_accumulated_memory_stats "
            "(no allocator trace tracker in this torch_npu; see docs/sharing.md)"
        )
        lines.append(f"  export keys of freed segments              {keys}")
    copies = getattr(torch_npu_ipc, "copies", None)
    if not torch.npu.device_count():
        lines.append("  cross-device copies                        no NPU")
    elif copies is not None and hasattr(copies, "status"):
        lines.append(f"  cross-device copies                        {_describe_copies(copies.status())}")
    else:
        lines.append("  cross-device copies                        torch_npu's own (copy hook not installed)")
    guard = getattr(torch_npu_ipc, "event_guard", None)
    if guard is not None:
        gs = guard.status()
        how = (
            "plugin: wait queued behind the record, destroy behind the waits (TORCH_NPU_IPC_EVENT_GUARD=0: off)"
            if gs["ordering"]
            else f"torch_npu's own ({gs['reason']})"
        )
        lines.append(f"  autograd cross-device events               {how}")
        records = "plugin (device-guard wrapper)" if gs["wrapped"] else "ignored by torch_npu: use record_stream"
        lines.append(f"  torch's stream records of shared memory    {records}")
    from torch_npu_ipc import streams

    refusal = streams.per_stream_queue_refusal()
    if streams._from_external is None:
        ext = "plugin, proxy stream (this torch_npu lacks getStreamFromExternal; see docs/external_stream.md)"
    elif refusal:
        ext = f"plugin, proxy stream ({refusal}; see docs/external_stream.md)"
    else:
        ext = "plugin over torch_npu's getStreamFromExternal (ops run on the foreign stream)"
    lines.append(f"  ExternalStream                             {ext}")
    from torch_npu_ipc._device import task_queue_on

    for bug in known_torch_npu_bugs(getattr(torch_npu, "__version__", ""), task_queue_on()):
        lines.append(f"WARNING: torch_npu {torch_npu.__version__} bug: {bug}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_npu_ipc doctor",
        description="What runs where, and why: versions, devices, native features, paths.",
    )
    parser.parse_args(argv)  # no options: --help, and an error for anything else
    for line in report():
        print(line)
    return 0


def _describe_copies(st: dict[str, Any]) -> str:
    """One line for the copy hook: on/off, the path copies take and why."""
    if not st["enabled"]:
        return "torch_npu's own (hook off: copies.disable() or TORCH_NPU_IPC_COPIES=0)"
    key = st["dispatch_key"]
    if st["path"] == "events":
        how = "queued behind torch_npu's tasks" if st["queued"] else "issued from the calling thread"
        return f"plugin, two-way event barrier, {how} (hook on at {key}; TORCH_NPU_IPC_COPIES=0 turns it off)"
    why = st["fallback_reason"] or "TORCH_NPU_IPC_COPIES=sync"
    return f"plugin, stream synchronize (hook on at {key}; events not used: {why})"
