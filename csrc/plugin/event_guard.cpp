#include "event_guard.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Logging.h>
#include <torch/version.h>

#include <atomic>
#include <bitset>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "acl_table.h"
#include "external_stream.h"
#include "record_use.h"
#include "task_queue.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

// The wrapper forwards every virtual of DeviceGuardImplInterface; it is built
// against the interface of torch 2.13 (the one checked), and left out on older
// torch, whose interface has fewer virtuals.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
#define TORCH_NPU_IPC_EVENT_GUARD 1
#else
#define TORCH_NPU_IPC_EVENT_GUARD 0
#endif

namespace torch_npu_ipc {
namespace {

std::atomic<uint64_t> deferred_destroys{0};
std::atomic<uint64_t> gated_waits{0};
std::atomic<bool> wrapped{false};   // the wrapper is in c10's registry
std::atomic<bool> ordering{false};  // and orders event calls across task queues

#if TORCH_NPU_IPC_EVENT_GUARD

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 64;

// An event recorded through the wrapper: its device, and the other devices
// whose streams were made to wait on it.
struct Tracked {
  c10::DeviceIndex device = -1;
  std::bitset<kMaxDevices> waiters;
};

class Registry {
 public:
  void recorded(void* event, c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.try_emplace(event, Tracked{device, {}});
  }

  // Notes that `device` waits on `event`; the device it was recorded on, -1
  // if it was not recorded here.
  c10::DeviceIndex blocked(void* event, c10::DeviceIndex device) {
    if (device < 0 || device >= kMaxDevices) return -1;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(event);
    if (it == events_.end()) return -1;
    if (it->second.device != device) it->second.waiters.set(device);
    return it->second.device;
  }

  // The event's entry, removed; device -1 when it was never recorded here.
  Tracked take(void* event) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(event);
    if (it == events_.end()) return {};
    Tracked t = it->second;
    events_.erase(it);
    return t;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, Tracked> events_;  // guarded by mu_
};

Registry& registry() {
  static Registry* r = std::make_unique<Registry>().release();  // used until the process ends
  return *r;
}

// Whether the current streams of `devices` all queue their work in torch_npu
// (the groups below must not contain a call that runs inline); starts their
// queues. Only then, and only where aclrtCreateEventExWithFlag exists (torch_npu
// otherwise destroys events once the runtime reports their waits complete),
// does the guard step in.
bool all_queued(const std::vector<c10::DeviceIndex>& devices) {
  const AclTable& t = acl();
  if (t.DestroyEvent == nullptr || t.CreateEventExWithFlag == nullptr) return false;
  std::vector<c10_npu::NPUStream> streams;
  for (c10::DeviceIndex d : devices) streams.push_back(c10_npu::getCurrentNPUStream(d));
  for (const auto& s : streams) {
    if (!runs_queued(s)) return false;
  }
  for (const auto& s : streams) ensure_queue_running(s);
  return true;
}

// Queues on `device` a call that fires `signal` when torch_npu's queue reaches
// it (or fails it, if the queue drops the call unrun).
void enqueue_marker(c10::DeviceIndex device, const char* name, std::shared_ptr<QueueSignal> signal) {
  enqueue(device, name, [fire = std::make_shared<QueueSignalSender>(std::move(signal))] {
    fire->fire(ACL_SUCCESS);
    return ACL_SUCCESS;
  });
}

// Holds the queue of `waiter` until the queue of `owner` has issued
// everything queued before now, the event's record among it: a wait that
// reached the runtime before its record would wait for nothing (torch_npu
// orders this only with per-stream queues). The wait torch_npu queues next
// on `waiter` comes after this gate.
bool gate_behind_record(c10::DeviceIndex owner, c10::DeviceIndex waiter) {
  if (!all_queued({owner, waiter})) return false;
  auto recorded = std::make_shared<QueueSignal>();
  EnqueueGroup group;
  enqueue_marker(owner, "torch_npu_ipc::event_guard_recorded", recorded);
  enqueue(waiter, "torch_npu_ipc::event_guard_gate", [recorded] { return recorded->wait(kQueueSignalTimeout); });
  gated_waits.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Queues the destroy of `event` (recorded on `owner`) behind the waits the
// `waiters` devices' queues hold; false when it cannot be queued that way
// (the caller then hands the destroy to torch_npu).
bool defer_destroy(void* event, c10::DeviceIndex owner, const std::bitset<kMaxDevices>& waiters) {
  const AclTable& t = acl();
  std::vector<c10::DeviceIndex> waiting;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (waiters.test(d)) waiting.push_back(static_cast<c10::DeviceIndex>(d));
  }
  std::vector<c10::DeviceIndex> involved = waiting;
  involved.push_back(owner);
  if (!all_queued(involved)) return false;

  std::vector<std::shared_ptr<QueueSignal>> waited;
  EnqueueGroup group;
  for (c10::DeviceIndex d : waiting) {
    // One queue per device: this marker runs after the wait torch_npu queued
    // on any stream of that device.
    auto signal = std::make_shared<QueueSignal>();
    waited.push_back(signal);
    enqueue_marker(d, "torch_npu_ipc::event_guard_waited", signal);
  }
  enqueue(owner, "torch_npu_ipc::event_guard_destroy", [&t, event, waited = std::move(waited)] {
    // A marker dropped unrun (its queue failed) dropped the wait before it:
    // the handle is free to go either way.
    for (const auto& signal : waited) (void)signal->wait(kQueueSignalTimeout);
    return t.DestroyEvent(static_cast<aclrtEvent>(event));
  });
  deferred_destroys.fetch_add(1, std::memory_order_relaxed);
  return true;
}

class NpuEventGuard final : public c10::impl::DeviceGuardImplInterface {
 public:
  explicit NpuEventGuard(const c10::impl::DeviceGuardImplInterface* inner) : inner_(inner) {}

  // ---- events: tracked, then forwarded
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    proxy_before_record(stream);  // an ExternalStream's proxy first waits for the owner's stream
    inner_->record(event, stream, device_index, flag);
    if (ordering.load() && *event != nullptr && runs_queued(c10_npu::NPUStream(stream))) {
      registry().recorded(*event, stream.device_index());
    }
  }

  void block(void* event, const c10::Stream& stream) const override {
    const c10::DeviceIndex waiter = stream.device_index();
    const c10::DeviceIndex owner = event != nullptr && ordering.load() ? registry().blocked(event, waiter) : -1;
    if (owner >= 0 && owner != waiter) {
      try {
        gate_behind_record(owner, waiter);
      } catch (const std::exception& e) {
        LOG(WARNING) << "torch_npu_ipc: could not order an event's wait after its record (" << e.what() << ")";
      }
    }
    inner_->block(event, stream);
    proxy_after_wait(stream);  // an ExternalStream's owner's stream waits for its proxy
  }

  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    if (event != nullptr && ordering.load()) {
      const Tracked t = registry().take(event);
      if (t.device >= 0 && t.waiters.any()) {
        try {
          if (defer_destroy(event, t.device, t.waiters)) return;
        } catch (const std::exception& e) {
          LOG(WARNING) << "torch_npu_ipc: could not queue an event's destroy behind its waits ("
                       << e.what() << "); torch_npu destroys it";
        }
      }
    }
    inner_->destroyEvent(event, device_index);
  }

  // ---- everything else: forwarded
  c10::DeviceType type() const override { return inner_->type(); }
  c10::Device exchangeDevice(c10::Device d) const override { return inner_->exchangeDevice(d); }
  c10::Device getDevice() const override { return inner_->getDevice(); }
  void setDevice(c10::Device d) const override { inner_->setDevice(d); }
  void uncheckedSetDevice(c10::Device d) const noexcept override { inner_->uncheckedSetDevice(d); }
  c10::Stream getStream(c10::Device d) const override { return inner_->getStream(d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return inner_->getDefaultStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false) const override {
    return inner_->getStreamFromGlobalPool(d, isHighPriority);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override { return inner_->getNewStream(d, priority); }
  c10::Stream exchangeStream(c10::Stream s) const override { return inner_->exchangeStream(s); }
  void* getStreamNativeHandle(const c10::Stream s) const override { return inner_->getStreamNativeHandle(s); }
  bool queryEvent(void* event) const override { return inner_->queryEvent(event); }
  c10::DeviceIndex deviceCount() const noexcept override { return inner_->deviceCount(); }
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override { return inner_->getDeviceCapability(d); }
  bool queryStream(const c10::Stream& s) const override { return inner_->queryStream(s); }
  void synchronizeStream(const c10::Stream& s) const override { inner_->synchronizeStream(s); }
  bool isStreamCapturing(const c10::Stream& s) const override { return inner_->isStreamCapturing(s); }
  void synchronizeEvent(void* event) const override { inner_->synchronizeEvent(event); }
  void synchronizeDevice(const c10::DeviceIndex d) const override { inner_->synchronizeDevice(d); }
  // What torch itself records (a Future's value on the stream that waits for
  // it, autograd's gradients on the consumer's stream): the block may be
  // shared memory, which torch_npu's allocator would ignore, and the stream
  // an external one (torch.npu.stream(ext) around the forward), which it
  // refuses at the free. torch_npu's guard hands every mark to its allocator.
  void recordDataPtrOnStream(const c10::DataPtr& p, const c10::Stream& s) const override {
    record_use(p, c10_npu::NPUStream(s));
  }
  double elapsedTime(void* a, void* b, const c10::DeviceIndex d) const override {
    return inner_->elapsedTime(a, b, d);
  }

 private:
  const c10::impl::DeviceGuardImplInterface* inner_;
};

#endif  // TORCH_NPU_IPC_EVENT_GUARD

}  // namespace

bool event_guard_install(bool order_events) {
#if TORCH_NPU_IPC_EVENT_GUARD
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (wrapped.load()) {
    ordering.store(order_events);
    return true;
  }
  auto& slot = c10::impl::device_guard_impl_registry[static_cast<size_t>(kNpu)];
  const c10::impl::DeviceGuardImplInterface* current = slot.load();
  if (current == nullptr) return false;
  // Leaked on purpose, as c10 requires of registered implementations: a
  // DeviceGuard may run in any destructor until the process ends.
  ordering.store(order_events);
  slot.store(std::make_unique<NpuEventGuard>(current).release());
  wrapped.store(true);
  return true;
#else
  (void)order_events;
  return false;
#endif
}

bool event_guard_ordering() { return ordering.load(); }
bool event_guard_wrapped() { return wrapped.load(); }

EventGuardStats event_guard_stats() {
  EventGuardStats s;
  s.deferred_destroys = deferred_destroys.load(std::memory_order_relaxed);
  s.gated_waits = gated_waits.load(std::memory_order_relaxed);
#if TORCH_NPU_IPC_EVENT_GUARD
  s.tracked_events = registry().size();
#endif
  return s;
}

}  // namespace torch_npu_ipc
