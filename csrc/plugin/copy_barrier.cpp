#include "copy_barrier.h"

#include <ATen/ExpandUtils.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "acl_device_guard.h"
#include "acl_table.h"
#include "event_manager.h"
#include "ipc_event.h"
#include "npu_format.h"
#include "npu_stream.h"
#include "record_use.h"
#include "task_queue.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace torch_npu_ipc {
namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 64;

// Peer access, enabled once per unordered device pair: 0 unknown, 1 on,
// -1 impossible (the copy is then left to torch_npu).
std::array<std::atomic<int8_t>, kMaxDevices * kMaxDevices>& peer_state() {
  static std::array<std::atomic<int8_t>, kMaxDevices * kMaxDevices> state{};
  return state;
}
std::mutex peer_mu;

}  // namespace

// ------------------------------------------------------- what it copies

bool plain_npu(const at::Tensor& t) {
  return t.defined() && t.device().type() == kNpu && t.layout() == at::kStrided && !t.is_quantized() &&
         !t.is_conj() && !t.is_neg() && base_format(t);
}

bool ensure_peer_access(c10::DeviceIndex s, c10::DeviceIndex d) {
  if (s < 0 || d < 0 || s >= kMaxDevices || d >= kMaxDevices) return false;
  auto& cell = peer_state()[std::min(s, d) * kMaxDevices + std::max(s, d)];
  int8_t v = cell.load(std::memory_order_acquire);
  if (v != 0) return v > 0;
  std::lock_guard<std::mutex> lock(peer_mu);
  v = cell.load(std::memory_order_relaxed);
  if (v != 0) return v > 0;
  const AclTable& t = acl();
  int8_t result = -1;
  if (t.DeviceCanAccessPeer != nullptr && t.DeviceEnablePeerAccess != nullptr && t.MemcpyAsync != nullptr) {
    int32_t can_sd = 0;
    int32_t can_ds = 0;
    if (handled(t.DeviceCanAccessPeer(&can_sd, s, d)) == ACL_SUCCESS &&
        handled(t.DeviceCanAccessPeer(&can_ds, d, s)) == ACL_SUCCESS &&
        can_sd != 0 && can_ds != 0) {
      // Both directions: the copy may go either way later. A failure here
      // usually means it is enabled already (torch_npu enables it for its
      // own copies); a real refusal surfaces as the memcpy's error.
      {
        AclDeviceGuard guard(s);
        (void)handled(t.DeviceEnablePeerAccess(d, 0));
      }
      {
        AclDeviceGuard guard(d);
        (void)handled(t.DeviceEnablePeerAccess(s, 0));
      }
      result = 1;
    }
  }
  cell.store(result, std::memory_order_release);
  return result > 0;
}

namespace {

// ------------------------------------------------------------ state

struct Stats {
  std::atomic<uint64_t> event_copies{0};
  std::atomic<uint64_t> sync_copies{0};
  std::atomic<uint64_t> signal_wait_ns{0};
  std::atomic<uint64_t> queue_full_waits{0};
  std::atomic<uint64_t> out_of_events_copies{0};
  // Set by a copy that found no IPC event left, cleared by the next event
  // copy: one warning per such episode.
  std::atomic<bool> out_of_events{false};
};

Stats& stats() {
  static Stats s;
  return s;
}

// A queued call's wait for the other device's queue, timed into the stats.
aclError timed_wait(QueueSignal& signal, Stats& st) {
  const auto start = std::chrono::steady_clock::now();
  aclError rc = signal.wait(kQueueSignalTimeout);
  const auto waited = std::chrono::steady_clock::now() - start;
  st.signal_wait_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count(),
                              std::memory_order_relaxed);
  return rc;
}

// Whether pooled IPC events work here: the support probe (cached by ipc_event) says whether they
// can; the first barrier failure at run time, if any, is remembered here.
std::mutex reason_mu;
std::string event_reason;  // guarded by reason_mu
std::atomic<bool> events_broken{false};

void mark_events_broken(const std::string& why) {
  std::lock_guard<std::mutex> lock(reason_mu);
  if (event_reason.empty()) event_reason = why;
  events_broken.store(true, std::memory_order_release);
}

bool events_usable(c10::DeviceIndex device) {
  return !events_broken.load(std::memory_order_acquire) && ipc_events_unsupported_reason(device).empty();
}

// ------------------------------------------------------------ the copy

void memcpy_d2d(const c10_npu::NPUStream& stream, void* dst, const void* src, size_t bytes) {
  auto copy = NPU_IPC_ACL(MemcpyAsync, "Cross-device copies");
  AclDeviceGuard guard(stream.device_index());
  check(copy(dst, bytes, src, bytes, ACL_MEMCPY_DEVICE_TO_DEVICE, launched(stream)),
        "aclrtMemcpyAsync(DEVICE_TO_DEVICE)");
}

void synchronize(const c10_npu::NPUStream& stream) {
  auto sync = NPU_IPC_ACL(SynchronizeStream, "Cross-device copies");
  AclDeviceGuard guard(stream.device_index());
  check(sync(launched(stream)), "aclrtSynchronizeStream");
}

// Queued barrier copies whose calls torch_npu's queues still hold. Each
// holds two pooled IPC events until its calls are gone, so a caller that
// outruns the queue threads would grow the pools by two events per copy
// (measured before this bound: 4,400 events after 20,000 back-to-back .to()
// in mode 2), and an IPC event costs ~300 us and a device resource on
// hardware. Beyond kMaxQueuedCopies the caller waits for the oldest copies,
// as it waits for torch_npu's own queue when that is full.
constexpr int kMaxQueuedCopies = 128;

class QueuedCopies {
 public:
  // A slot, given back when the last copy of the returned handle is gone.
  std::shared_ptr<void> take() {
    std::unique_lock<std::mutex> lock(mu_);
    if (count_ >= kMaxQueuedCopies) {
      stats().queue_full_waits.fetch_add(1, std::memory_order_relaxed);
      TORCH_CHECK(cv_.wait_for(lock, kQueueSignalTimeout, [this] { return count_ < kMaxQueuedCopies; }),
                  "cross-device copy: ", kMaxQueuedCopies, " earlier copies have sat in torch_npu's task queues for ",
                  std::chrono::duration_cast<std::chrono::seconds>(kQueueSignalTimeout).count(),
                  " s; a task queue is stuck");
    }
    ++count_;
    return std::shared_ptr<void>(nullptr, [this](void*) {
      {
        std::lock_guard<std::mutex> guard(mu_);
        --count_;
      }
      cv_.notify_one();
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;  // guarded by mu_
};

QueuedCopies& queued_copies() {
  static QueuedCopies* q = std::make_unique<QueuedCopies>().release();  // outlives torch_npu's queues
  return *q;
}

// What a queued group holds until torch_npu's queues are done with both of
// its calls. Members are destroyed in reverse order: the events go back to
// their pools before the slot frees, so a caller woken by the slot finds them
// there and the pools stay within two events per slot.
struct GroupHold {
  std::shared_ptr<void> slot;
  std::shared_ptr<IpcEvent> dst_ready;
  std::shared_ptr<IpcEvent> copied;
};

// The event barrier, for streams whose work torch_npu queues (see
// task_queue.h): one group of two queued calls, so the caller never waits
// for a queue thread and each half reaches the runtime in order with the
// work around it on its stream:
//
//   D's queue: record E1 -> (S's call ran) -> D's stream waits on E2
//   S's queue: (E1 recorded) -> S's stream waits on E1, memcpy, record E2
//
// D's queue thread holds D's later tasks back while S's queue catches up to
// the copy; they would wait for it on the device anyway.
void queued_barrier(const c10_npu::NPUStream& src_stream, const c10_npu::NPUStream& dst_stream, void* dst,
                    const void* src, size_t bytes, std::shared_ptr<const GroupHold> held) {
  const AclTable& t = acl();
  Stats& st = stats();
  aclrtStream raw_dst = dst_stream.stream(/*need_empty=*/false);
  aclrtStream raw_src = src_stream.stream(/*need_empty=*/false);
  aclrtEvent dst_ready = held->dst_ready->raw();
  aclrtEvent copied = held->copied->raw();
  auto recorded = std::make_shared<QueueSignal>();
  auto transferred = std::make_shared<QueueSignal>();
  ensure_queue_running(dst_stream);
  ensure_queue_running(src_stream);
  EnqueueGroup group;
  enqueue(dst_stream.device_index(), "torch_npu_ipc::copy_barrier_dst",
          [&t, &st, held, dst_ready, copied, raw_dst, transferred,
           fire = std::make_shared<QueueSignalSender>(recorded)] {
            aclError rc = t.RecordEvent(dst_ready, raw_dst);  // dst memory free of earlier work on D ...
            fire->fire(rc);
            if (rc == ACL_SUCCESS) rc = timed_wait(*transferred, st);
            if (rc == ACL_SUCCESS) rc = t.StreamWaitEvent(raw_dst, copied);  // later work on D sees the data
            return rc;
          });
  enqueue(src_stream.device_index(), "torch_npu_ipc::copy_barrier_src",
          [&t, &st, held = std::move(held), dst_ready, copied, raw_src, dst, src, bytes, recorded,
           fire = std::make_shared<QueueSignalSender>(transferred)] {
            aclError rc = timed_wait(*recorded, st);
            if (rc == ACL_SUCCESS) rc = t.StreamWaitEvent(raw_src, dst_ready);  // ... before S's stream writes it
            if (rc == ACL_SUCCESS) rc = t.MemcpyAsync(dst, bytes, src, bytes, ACL_MEMCPY_DEVICE_TO_DEVICE, raw_src);
            if (rc == ACL_SUCCESS) rc = t.RecordEvent(copied, raw_src);
            fire->fire(rc);
            return rc;
          });
}

// The event barrier issued from the caller's thread, for when torch_npu
// launches work at once on one of the streams (task queue off, or a
// synchronously launched stream).
void direct_barrier(const c10_npu::NPUStream& src_stream, const c10_npu::NPUStream& dst_stream, void* dst,
                    const void* src, size_t bytes, const std::shared_ptr<IpcEvent>& dst_ready,
                    const std::shared_ptr<IpcEvent>& copied) {
  const AclTable& t = acl();
  aclrtStream raw_dst = nullptr;
  {
    AclDeviceGuard guard(dst_stream.device_index());
    raw_dst = launched(dst_stream);
    check(t.RecordEvent(dst_ready->raw(), raw_dst), "aclrtRecordEvent");  // dst memory free of earlier work on D ...
  }
  {
    AclDeviceGuard guard(src_stream.device_index());
    aclrtStream raw_src = launched(src_stream);
    check(t.StreamWaitEvent(raw_src, dst_ready->raw()), "aclrtStreamWaitEvent");  // ... before S's stream writes it
    check(t.MemcpyAsync(dst, bytes, src, bytes, ACL_MEMCPY_DEVICE_TO_DEVICE, raw_src),
          "aclrtMemcpyAsync(DEVICE_TO_DEVICE)");
    check(t.RecordEvent(copied->raw(), raw_src), "aclrtRecordEvent");
  }
  AclDeviceGuard guard(dst_stream.device_index());
  check(t.StreamWaitEvent(raw_dst, copied->raw()), "aclrtStreamWaitEvent");  // later work on D sees the data
}

// A device had no IPC event left for this copy, which synchronizes instead:
// counted, and warned about once per episode (the next event copy ends it).
// Not remembered as broken: events are used again as soon as there are some.
void note_out_of_events(const std::string& why) {
  Stats& st = stats();
  st.out_of_events_copies.fetch_add(1, std::memory_order_relaxed);
  if (!st.out_of_events.exchange(true, std::memory_order_acq_rel)) {
    TORCH_WARN("torch_npu_ipc: a cross-device copy synchronized the streams instead of using events: ", why,
               "\nCopies use events again as soon as the device has IPC events left; "
               "torch_npu_ipc.copies.status()['out_of_events_copies'] counts the copies that could not.");
  }
}

// The event barrier around one transfer; false when events failed before
// anything was issued (the caller then synchronizes instead).
bool barrier_copy(const c10_npu::NPUStream& src_stream, const c10_npu::NPUStream& dst_stream, void* dst,
                  const void* src, size_t bytes) {
  const bool queued = runs_queued(src_stream) && runs_queued(dst_stream);
  auto held = std::make_shared<GroupHold>();
  if (queued) held->slot = queued_copies().take();
  std::string exhausted;
  try {
    held->dst_ready = EventManager::get().try_acquire(dst_stream.device_index(), &exhausted);
    if (held->dst_ready != nullptr) {
      held->copied = EventManager::get().try_acquire(src_stream.device_index(), &exhausted);
    }
  } catch (const c10::Error& e) {
    mark_events_broken(std::string("interprocess events are unusable (") + e.what_without_backtrace() +
                       "); cross-device copies synchronize the streams instead");
    return false;
  }
  if (held->copied == nullptr) {
    note_out_of_events(exhausted);
    return false;
  }
  stats().out_of_events.store(false, std::memory_order_release);
  // Raw calls on the pooled events: a pooled event is held exclusively until
  // every call holding it is gone, and never destroyed while pooled, so
  // IpcEvent's per-use fences (kept for deferred destruction of dropped
  // events) are not needed here and would double the ACL calls.
  if (queued) {
    queued_barrier(src_stream, dst_stream, dst, src, bytes, std::move(held));
  } else {
    direct_barrier(src_stream, dst_stream, dst, src, bytes, held->dst_ready, held->copied);
  }
  return true;
}

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes().equals(b.sizes()) && a.strides().equals(b.strides());
}

}  // namespace

// ------------------------------------------------------------ public API

void cross_device_copy(const at::Tensor& dst, const at::Tensor& src, CopyMode mode, bool dst_is_fresh) {
  TORCH_CHECK_VALUE(dst.device().type() == kNpu && src.device().type() == kNpu,
                    "cross_device_copy copies between NPU tensors, got ", src.device(), " -> ", dst.device());
  const c10::DeviceIndex s = src.device().index();
  const c10::DeviceIndex d = dst.device().index();
  TORCH_CHECK_VALUE(s != d, "cross_device_copy needs two different devices, got npu:", int(s), " twice");
  TORCH_CHECK_VALUE(at::is_expandable_to(src.sizes(), dst.sizes()), "source of shape ", src.sizes(),
                    " cannot be broadcast to the destination's shape ", dst.sizes());
  if (dst.numel() == 0) return;
  TORCH_CHECK(ensure_peer_access(s, d), "npu:", int(s), " and npu:", int(d), " cannot access each other's memory");

  const c10_npu::NPUStream src_stream = c10_npu::getCurrentNPUStream(s);
  const c10_npu::NPUStream dst_stream = c10_npu::getCurrentNPUStream(d);

  // What crosses the link: `a` (dense, on S) into `b` (same layout, on D).
  // A cast runs on S when it shrinks the data, else on D after the copy.
  const bool cast_before = src.scalar_type() != dst.scalar_type() &&
                           c10::elementSize(dst.scalar_type()) < c10::elementSize(src.scalar_type());
  // A tensor made here lives on its device's current stream, the one the
  // transfer orders (a: S's, which runs it; b: D's, which waits for it).
  // One made on S takes the destination's layout when that is dense and of
  // the source's shape, so that the transfer lands in place.
  const bool dst_takes_a = dst.sizes().equals(src.sizes()) && dst.is_non_overlapping_and_dense();
  const auto dense_on_s = [&](at::ScalarType dtype) {
    const auto options = src.options().dtype(dtype);
    at::Tensor t = dst_takes_a ? at::empty_strided(dst.sizes(), dst.strides(), options)
                               : at::empty_like(src, options, at::MemoryFormat::Preserve);
    t.copy_(src);  // same device: torch_npu's kernel on S's current stream
    return t;
  };
  at::Tensor a = src;
  if (cast_before) {
    a = dense_on_s(dst.scalar_type());
  } else if (!src.is_non_overlapping_and_dense()) {
    a = dense_on_s(src.scalar_type());
  }
  const bool direct = same_layout(a, dst) && dst.is_non_overlapping_and_dense();
  at::Tensor b = direct ? dst : at::empty_strided(a.sizes(), a.strides(), dst.options().dtype(a.scalar_type()));
  const size_t bytes = static_cast<size_t>(a.numel()) * a.element_size();

  bool done = false;
  if (mode == CopyMode::kEvents) {
    if (events_usable(s)) done = barrier_copy(src_stream, dst_stream, b.data_ptr(), a.const_data_ptr(), bytes);
    if (done) stats().event_copies.fetch_add(1, std::memory_order_relaxed);
    // No events here, or they just failed: said once per process (a device
    // out of events has its own warning, per episode: note_out_of_events).
    if (!done && !events_usable(s)) {
      TORCH_WARN_ONCE("torch_npu_ipc: ", copies_event_unsupported_reason(s),
                      " (torch_npu_ipc.copies.status() and `python -m torch_npu_ipc doctor` say so too)");
    }
  }
  if (!done) {
    synchronize(dst_stream);  // dst memory free of earlier work on D
    memcpy_d2d(src_stream, b.data_ptr(), a.const_data_ptr(), bytes);
    synchronize(src_stream);  // the data landed before D's stream goes on
    stats().sync_copies.fetch_add(1, std::memory_order_relaxed);
  }
  // The caller's blocks are used on the current streams: the source is read
  // on S's (by the transfer, or by the dense / cast copy into `a`), the
  // destination written on D's (by the transfer, or by the copy from `b`
  // below), which also waits for the transfer (barrier) or follows it
  // (synchronize). Keep each from being reused by its own stream before
  // then: a block is only ever marked with a stream of its own device,
  // because the allocator records the marking event with the block's device
  // current, and the runtime refuses a record on another device's stream
  // (107003). Blocks made here (`a`, `b`, a fresh `.to()` result) already
  // belong to those streams: torch_npu's recordStream is not a no-op for a
  // block's own stream (it costs an event record at the free, then
  // polling), so they are not marked. Before 2026-12-07 only `a` and `b`
  // were: a cast or strided source, or a destination written from `b`, was
  // not (test_copies.py, test_blocks_freed_after_a_copy_on_side_streams).
  record_use(src.storage().data_ptr(), src_stream);
  if (!dst_is_fresh) record_use(dst.storage().data_ptr(), dst_stream);
  if (!direct) dst.copy_(b);  // same device: cast / broadcast / strides on D's current stream
}

std::string copies_event_unsupported_reason(c10::DeviceIndex device) {
  const std::string& probed = ipc_events_unsupported_reason(device);
  if (!probed.empty()) return probed + "; cross-device copies synchronize the streams instead";
  std::lock_guard<std::mutex> lock(reason_mu);
  return event_reason;
}

bool copies_queued() { return runs_queued(c10_npu::getCurrentNPUStream()); }

BarrierStats barrier_stats() {
  BarrierStats s;
  s.event_copies = stats().event_copies.load();
  s.sync_copies = stats().sync_copies.load();
  s.signal_wait_ns = stats().signal_wait_ns.load();
  s.queue_full_waits = stats().queue_full_waits.load();
  s.out_of_events_copies = stats().out_of_events_copies.load();
  return s;
}

}  // namespace torch_npu_ipc
