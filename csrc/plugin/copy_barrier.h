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
// How ordinary Tensor.to() / copy_() calls reach it: copy_hook.h.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace torch_npu_ipc {

enum class CopyMode : int {
  kEvents = 0,       // two-way event barrier (default)
  kSynchronize = 1,  // host synchronizes the two streams (fallback / forced)
};

struct BarrierStats {
  uint64_t event_copies = 0;  // cross-device copies done with the event barrier
  uint64_t sync_copies = 0;   // cross-device copies done with stream synchronize
  // Time torch_npu's queue threads spent, inside event-barrier copies,
  // waiting for the other device's queue to issue its half (the caller's
  // thread never waits; see task_queue.h).
  uint64_t signal_wait_ns = 0;
  // Queued barrier copies that waited because 128 earlier ones were still in
  // torch_npu's queues (backpressure that bounds the pooled events).
  uint64_t queue_full_waits = 0;
  // Copies that synchronized because a device had no IPC event left (the
  // barrier needs one on each device); events are used again once there are.
  uint64_t out_of_events_copies = 0;
};

// Copies `src` (NPU) into `dst` (NPU, another device) as described above.
// Shapes must be broadcastable (src to dst).
// `dst_is_fresh`: dst was just allocated on its device's current stream
// (Tensor.to()), so its block needs no marking for the transfer's streams.
void cross_device_copy(const at::Tensor& dst, const at::Tensor& src, CopyMode mode, bool dst_is_fresh = false);

// Whether the barrier copies `t` itself: a defined, strided NPU tensor in a
// base format (ND, NCHW, NHWC, NCDHW), neither quantized nor a conjugate or
// negative view. Copies of any other tensor are left to torch_npu.
bool plain_npu(const at::Tensor& t);

// Enables peer access between npu:s and npu:d in both directions, once per
// pair; false when the runtime says the pair cannot access each other.
bool ensure_peer_access(c10::DeviceIndex s, c10::DeviceIndex d);

// Why the event barrier cannot be used in this process ("" when it can).
// Probed lazily; forces the synchronize path when non-empty.
std::string copies_event_unsupported_reason(c10::DeviceIndex device);

// Whether barrier copies on the current streams go through torch_npu's task
// queues (queued groups, see task_queue.h) rather than being issued from the
// calling thread (task queue off, or a synchronously launched stream).
bool copies_queued();

BarrierStats barrier_stats();

}  // namespace torch_npu_ipc
