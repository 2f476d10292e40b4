#include "external_stream.h"

#include <dlfcn.h>

#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "acl_device_guard.h"
#include "acl_table.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"

namespace torch_npu_ipc {
namespace {

constexpr const char* kFeature = "ExternalStream";

// c10_npu::getStreamFromExternal(void*, signed char), C10_NPU_API in torch_npu 2.13.
using StreamFromExternalFn = c10_npu::NPUStream (*)(aclrtStream, c10::DeviceIndex);
constexpr const char* kStreamFromExternalSymbol = "_ZN7c10_npu21getStreamFromExternalEPva";

StreamFromExternalFn stream_from_external_fn() {
  static const StreamFromExternalFn fn = [] {
    if (hidden_by_env("c10_npu::getStreamFromExternal")) return StreamFromExternalFn{nullptr};
    // libtorch_npu.so is loaded (the plugin links it); look in it first.
    void* lib = dlopen("libtorch_npu.so", RTLD_NOW | RTLD_NOLOAD);
    void* sym = lib != nullptr ? dlsym(lib, kStreamFromExternalSymbol) : nullptr;
    if (sym == nullptr) sym = dlsym(RTLD_DEFAULT, kStreamFromExternalSymbol);
    return reinterpret_cast<StreamFromExternalFn>(sym);
  }();
  return fn;
}

// Events that order one raw stream after another. An event goes back to the
// free list once its record completed: every wait bound to that record was
// issued before, so a new record cannot move it.
class OrderEvents {
 public:
  static OrderEvents& get() {
    // Leaked, handles included, as torch_npu does: a daemon thread may still use it at exit.
    static OrderEvents* pool = std::make_unique<OrderEvents>().release();
    return *pool;
  }

  aclrtEvent acquire(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& pending = pending_[device];
    auto& free = free_[device];
    auto query = acl().QueryEventStatus;
    for (auto it = pending.begin(); it != pending.end();) {
      aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
      if (query != nullptr && handled(query(*it, &status)) == ACL_SUCCESS &&
          status == ACL_EVENT_RECORDED_STATUS_COMPLETE) {
        free.push_back(*it);
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    if (!free.empty()) {
      aclrtEvent e = free.back();
      free.pop_back();
      return e;
    }
    auto create = NPU_IPC_ACL(CreateEventExWithFlag, kFeature);
    aclrtEvent e = nullptr;
    check(create(&e, ACL_EVENT_SYNC), "aclrtCreateEventExWithFlag(ACL_EVENT_SYNC)");
    return e;
  }

  void release(c10::DeviceIndex device, aclrtEvent event) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[device].push_back(event);
  }

 private:
  std::mutex mu_;
  std::unordered_map<int, std::vector<aclrtEvent>> free_;
  std::unordered_map<int, std::vector<aclrtEvent>> pending_;
};

// Returns a pooled event to the pool when the scope ends, whatever happened.
class PooledEvent {
 public:
  explicit PooledEvent(c10::DeviceIndex device) : device_(device), event_(OrderEvents::get().acquire(device)) {}
  ~PooledEvent() { OrderEvents::get().release(device_, event_); }
  PooledEvent(const PooledEvent&) = delete;
  PooledEvent& operator=(const PooledEvent&) = delete;
  aclrtEvent get() const { return event_; }

 private:
  c10::DeviceIndex device_;
  aclrtEvent event_;
};

// Records a private pooled event of `device` on `stream` with `device`
// current: the cheapest work, and work is what the runtime checks against
// the current context (aclrtStreamQuery is not checked). With `wait_done`,
// synchronizes the stream after the record (for a stream that was idle, so
// only the record is waited for: otherwise a query() right after the
// constructor saw the probe's own record still pending).
aclError record_from(aclrtStream stream, c10::DeviceIndex device, bool wait_done = false) {
  auto record = NPU_IPC_ACL(RecordEvent, kFeature);
  AclDeviceGuard guard(device);
  PooledEvent event(device);
  const aclError rc = record(event.get(), stream);
  if (rc == ACL_SUCCESS && wait_done && acl().SynchronizeStream != nullptr) {
    (void)handled(acl().SynchronizeStream(stream));
  }
  return rc;
}

}  // namespace

bool has_stream_from_external() { return stream_from_external_fn() != nullptr; }

bool is_external(const c10_npu::NPUStream& stream) {
  constexpr c10::StreamId kExternalIds = c10::StreamId{1} << 30;
  return has_stream_from_external() && (stream.id() & kExternalIds) != 0;
}

void record_external_use(const c10::DataPtr& ptr, const c10_npu::NPUStream& external) {
  const c10_npu::NPUStream marker = c10_npu::getNPUStreamFromPool(external.device_index());
  order_streams(marker.stream(/*need_empty=*/false), launched(external), external.device_index());
  c10_npu::NPUCachingAllocator::recordStream(ptr, marker);
}

void run_beside_external(const c10_npu::NPUStream& external, const std::function<void()>& f) {
  const c10::DeviceIndex device = external.device_index();
  const c10_npu::NPUStream beside = c10_npu::getNPUStreamFromPool(device);
  order_streams(launched(beside), launched(external), device);
  {
    c10::StreamGuard guard(beside.unwrap());
    f();
  }
  order_streams(launched(external), launched(beside), device);  // f's work reaches the runtime first
}

StreamRef stream_from_external(aclrtStream stream, c10::DeviceIndex device) {
  StreamFromExternalFn fn = stream_from_external_fn();
  TORCH_CHECK(fn != nullptr,
              "this torch_npu does not export c10_npu::getStreamFromExternal (added in torch_npu 2.13.0, "
              "2.12.0.post3, 2.11.0.post3, 2.10.0.post7, 2.9.0.post9, 2.7.1.post11)");
  TORCH_CHECK_VALUE(stream != nullptr, "an external stream cannot be the null stream");
  c10_npu::NPUStream s = fn(stream, device);
  return StreamRef{s.id(), s.device_index(), static_cast<int64_t>(s.device_type())};
}

StreamProbe probe_stream(aclrtStream stream, c10::DeviceIndex device) {
  auto query = NPU_IPC_ACL(StreamQuery, kFeature);
  AclDeviceGuard guard(device);
  aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
  aclError rc = query(stream, &status);
  if (rc != ACL_SUCCESS) return {acl_failure("aclrtStreamQuery", rc), false};
  // CANN's aclrtStreamQuery (and aclrtSynchronizeStream, which switches to
  // the stream's context) accept a stream of another device; queuing work
  // does not. Without aclrtCreateEventExWithFlag (older CANN) there is no
  // pooled event: skip the check rather than refuse a stream that may well
  // be usable.
  if (acl().CreateEventExWithFlag == nullptr) return {};
  // An idle stream stays idle for the caller: the probe's record has run when
  // the constructor returns. A busy one is not waited for.
  rc = record_from(stream, device, /*wait_done=*/status == ACL_STREAM_STATUS_COMPLETE);
  if (rc == ACL_SUCCESS) return {};
  return {acl_failure("aclrtRecordEvent", rc), rc == ACL_ERROR_RT_STREAM_CONTEXT};
}

int find_stream_device(aclrtStream stream, c10::DeviceIndex except) {
  const AclTable& t = acl();
  uint32_t n = 0;
  if (t.GetDeviceCount == nullptr || t.GetPrimaryCtxState == nullptr || t.RecordEvent == nullptr ||
      t.CreateEventExWithFlag == nullptr || handled(t.GetDeviceCount(&n)) != ACL_SUCCESS) {
    return -1;
  }
  for (uint32_t d = 0; d < n; ++d) {
    if (static_cast<int>(d) == except) continue;
    int32_t active = 0;
    uint32_t flags = 0;
    if (handled(t.GetPrimaryCtxState(static_cast<int32_t>(d), &flags, &active)) != ACL_SUCCESS || active == 0) continue;
    if (handled(record_from(stream, static_cast<c10::DeviceIndex>(d))) == ACL_SUCCESS) return static_cast<int>(d);
  }
  return -1;
}

void synchronize_stream(aclrtStream stream, c10::DeviceIndex device) {
  auto sync = NPU_IPC_ACL(SynchronizeStream, kFeature);
  AclDeviceGuard guard(device);
  check(sync(stream), "aclrtSynchronizeStream(external stream)");
}

bool query_stream(aclrtStream stream, c10::DeviceIndex device) {
  auto query = NPU_IPC_ACL(StreamQuery, kFeature);
  AclDeviceGuard guard(device);
  aclrtStreamStatus status = ACL_STREAM_STATUS_RESERVED;
  check(query(stream, &status), "aclrtStreamQuery(external stream)");
  return status == ACL_STREAM_STATUS_COMPLETE;
}

void record_event(aclrtEvent event, aclrtStream stream, c10::DeviceIndex device) {
  auto record = NPU_IPC_ACL(RecordEvent, kFeature);
  AclDeviceGuard guard(device);
  check(record(event, stream), "aclrtRecordEvent(external stream)");
}

void wait_event(aclrtStream stream, aclrtEvent event, c10::DeviceIndex device) {
  auto wait = NPU_IPC_ACL(StreamWaitEvent, kFeature);
  AclDeviceGuard guard(device);
  check(wait(stream, event), "aclrtStreamWaitEvent(external stream)");
}

void order_streams(aclrtStream waiter, aclrtStream signaller, c10::DeviceIndex device) {
  if (waiter == signaller) return;
  auto record = NPU_IPC_ACL(RecordEvent, kFeature);
  auto wait = NPU_IPC_ACL(StreamWaitEvent, kFeature);
  AclDeviceGuard guard(device);
  PooledEvent event(device);
  check(record(event.get(), signaller), "aclrtRecordEvent(stream order)");
  check(wait(waiter, event.get()), "aclrtStreamWaitEvent(stream order)");
}

namespace {

struct Proxies {
  std::atomic<bool> any{false};  // the fast path of every event record and wait
  std::mutex mu;
  // Guarded by mu: each proxy's foreign streams, with how many live
  // ExternalStream objects wrap each.
  std::map<std::pair<c10::DeviceIndex, c10::StreamId>, std::vector<std::pair<aclrtStream, int64_t>>> foreign;
};

Proxies& proxies() {
  static Proxies* p = std::make_unique<Proxies>().release();  // read by threads outliving static destruction
  return *p;
}

std::vector<aclrtStream> foreign_of(const c10::Stream& s) {
  Proxies& p = proxies();
  if (!p.any.load(std::memory_order_acquire) || s.device_type() != c10::DeviceType::PrivateUse1) return {};
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.foreign.find({s.device_index(), s.id()});
  std::vector<aclrtStream> out;
  if (it != p.foreign.end()) {
    for (const auto& entry : it->second) out.push_back(entry.first);
  }
  return out;
}

}  // namespace

void note_proxy(c10::DeviceIndex device, c10::StreamId proxy, aclrtStream stream) {
  Proxies& p = proxies();
  std::lock_guard<std::mutex> lock(p.mu);
  auto& streams = p.foreign[{device, proxy}];
  auto it = std::find_if(streams.begin(), streams.end(), [&](const auto& e) { return e.first == stream; });
  if (it == streams.end()) {
    streams.emplace_back(stream, 1);
  } else {
    ++it->second;
  }
  p.any.store(true, std::memory_order_release);
}

void forget_proxy(c10::DeviceIndex device, c10::StreamId proxy, aclrtStream stream) {
  Proxies& p = proxies();
  std::lock_guard<std::mutex> lock(p.mu);
  auto found = p.foreign.find({device, proxy});
  if (found == p.foreign.end()) return;
  auto& streams = found->second;
  auto it = std::find_if(streams.begin(), streams.end(), [&](const auto& e) { return e.first == stream; });
  if (it != streams.end() && --it->second == 0) streams.erase(it);
  if (streams.empty()) p.foreign.erase(found);
}

namespace {

// Orders `waiter` after `signaller` for a proxy's event. A foreign stream its
// owner destroyed while an object still wraps it (unused: the lifetime rule,
// docs/external_stream.md) has nothing left to order with; the proxy is a
// pool stream other torch streams share, and their events must not fail for
// it. Any other failure propagates.
void order_with_foreign(aclrtStream waiter, aclrtStream signaller, aclrtStream foreign, c10::DeviceIndex device) {
  try {
    order_streams(waiter, signaller, device);
  } catch (const c10::Error&) {
    bool alive = true;
    try {
      (void)query_stream(foreign, device);
    } catch (const c10::Error&) {
      alive = false;
    }
    if (alive) throw;
  }
}

}  // namespace

void proxy_before_record(const c10::Stream& s) {
  const std::vector<aclrtStream> foreign = foreign_of(s);
  if (foreign.empty()) return;
  const aclrtStream raw = launched(c10_npu::NPUStream(s));
  for (aclrtStream f : foreign) order_with_foreign(raw, f, f, s.device_index());
}

void proxy_after_wait(const c10::Stream& s) {
  const std::vector<aclrtStream> foreign = foreign_of(s);
  if (foreign.empty()) return;
  const aclrtStream raw = launched(c10_npu::NPUStream(s));  // the wait reaches the runtime first
  for (aclrtStream f : foreign) order_with_foreign(f, raw, f, s.device_index());
}

}  // namespace torch_npu_ipc
