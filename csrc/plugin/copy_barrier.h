// Cross-device copies between NPUs, ordered by a two-way event barrier.
//
// dst.copy_(src) / src.to(dst_device) with src on npu:S and dst on npu:D
// (S != D) run as:
//
//   E1 = pooled IPC event of D, recorded on D's current stream
//   S's current stream waits on E1      (dst memory is free of earlier work)
//   aclrtMemcpyAsync(D2D) on S's current stream
//   E2 = pooled IPC event of S, recorded on S's current stream
//   D's current stream waits on E2      (later work on D sees the data)
//
// and the host never blocks on a stream. Non-contiguous sources are made
// dense on S, dtype casts run on the side that moves fewer bytes, and
// broadcasting / non-contiguous destinations are finished on D's current
// stream after the barrier. Where IPC events are unusable the copy falls
// back to synchronizing the two streams from the host.
//
// The copy is hooked into the dispatcher by registering boxed kernels for
// aten::copy_ and aten::_to_copy (a torch::Library owned by this module).
// On torch >= 2.9 they sit under the PrivateUse1 key, and every call that is
// not an NPU -> other-NPU copy is handed to the kernel torch_npu had
// registered, captured before ours was installed (c10::SafeKernelFunction).
// Older torch cannot capture it: there they sit under BackendSelect and hand
// a call on by redispatching below that key. Disabling destroys the Library,
// which restores the dispatcher's previous kernels.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace torch_npu_ipc {

enum class CopyMode : int {
  kEvents = 0,       // two-way event barrier (default)
  kSynchronize = 1,  // host synchronizes the two streams (fallback / forced)
};

struct CopyStats {
  uint64_t event_copies = 0;  // cross-device copies done with the event barrier
  uint64_t sync_copies = 0;   // cross-device copies done with stream synchronize
  uint64_t delegated = 0;     // calls handed to torch_npu's own kernel
  // Time torch_npu's queue threads spent, inside event-barrier copies,
  // waiting for the other device's queue to issue its half (the caller's
  // thread never waits; see task_queue.h).
  uint64_t signal_wait_ns = 0;
  // Queued barrier copies that waited because 128 earlier ones were still in
  // torch_npu's queues (backpressure that bounds the pooled events).
  uint64_t queue_full_waits = 0;
};

// Installs the dispatcher hook (idempotent) in `mode`.
void copies_enable(CopyMode mode);
// Removes the hook: torch_npu's own kernels run again.
void copies_disable();
bool copies_enabled();
CopyMode copies_mode();
// The dispatch key the hook registers at: "PrivateUse1" (torch >= 2.9, which
// can capture the kernel it shadows) or "BackendSelect" (older torch).
std::string copies_dispatch_key();

// Why the event barrier cannot be used in this process ("" when it can).
// Probed lazily; forces the synchronize path when non-empty.
std::string copies_event_unsupported_reason(c10::DeviceIndex device);

// Whether barrier copies on the current streams go through torch_npu's task
// queues (queued groups, see task_queue.h) rather than being issued from the
// calling thread (task queue off, or a synchronously launched stream).
bool copies_queued();

CopyStats copies_stats();

// Copies `src` (NPU) into `dst` (NPU, another device) as described above.
// Shapes must be broadcastable (src to dst). Independent of the hook.
// `dst_is_fresh`: dst was just allocated on its device's current stream
// (Tensor.to()), so its block needs no marking for the transfer's streams.
void cross_device_copy(const at::Tensor& dst, const at::Tensor& src, CopyMode mode, bool dst_is_fresh = false);

}  // namespace torch_npu_ipc
