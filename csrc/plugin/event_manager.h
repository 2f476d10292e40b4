// Lifetime of IPC events, in the spirit of torch_npu's NPUEventManager.
//
//  * Deferred destruction: an IPC event is destroyed only once every record
//    and wait issued on it by this process has run on the device. Its local
//    fences tell (CANN forbids aclrtQueryEventWaitStatus on IPC events).
//  * Export grace: an event whose handle left this process is kept a while
//    after its owner dropped it (TORCH_NPU_IPC_EXPORT_GRACE_MS, default
//    5000), because CANN forbids destroying it before importers opened it.
//  * Pool: creating an IPC event costs ~300 us on hardware, so internal
//    users (tensor sharing, copies) take events from a per-device pool.
//    Reusing one is safe: a wait binds to the record current when issued.
#pragma once

#include "acl_abi.h"
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace torch_npu_ipc {

class IpcEvent;

struct EventStats {
  uint64_t created = 0;
  uint64_t destroyed = 0;
  uint64_t retired_pending = 0;  // waiting for fences or the export grace
  uint64_t pooled = 0;           // idle in the pools
};

class EventManager {
  struct Token {};

 public:
  static EventManager& get();
  explicit EventManager(Token) {}

  // Takes ownership of a dropped event; destroys it once its fences ran
  // (and, if it was exported, the grace period passed).
  void retire(aclrtEvent event, c10::DeviceIndex device, std::vector<aclrtEvent> fences, bool exported);

  // Destroys what can be destroyed now; with `force`, waits for pending
  // fences and ignores the export grace (used at exit and by tests).
  // Returns how many events it destroyed.
  size_t collect(bool force = false);

  // A pooled IPC event on `device`; it returns to the pool when released.
  std::shared_ptr<IpcEvent> acquire(c10::DeviceIndex device);
  // The same, but nullptr when the pool is empty and the device has no IPC
  // event left, with the reason in `*exhausted` (IpcEvent::try_create).
  std::shared_ptr<IpcEvent> try_acquire(c10::DeviceIndex device, std::string* exhausted);

  void note_created() { std::lock_guard<std::mutex> lock(mu_); ++stats_.created; }
  EventStats stats();

 private:
  struct Retired {
    aclrtEvent event;
    c10::DeviceIndex device;
    std::vector<aclrtEvent> fences;
    std::chrono::steady_clock::time_point not_before;
  };
  bool drained(const Retired& r, bool force) const;
  void destroy(const Retired& r) noexcept;

  std::mutex mu_;
  std::deque<Retired> retired_;
  std::vector<std::vector<std::shared_ptr<IpcEvent>>> pools_;
  EventStats stats_;
};

}  // namespace torch_npu_ipc
