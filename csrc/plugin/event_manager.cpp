#include "event_manager.h"

#include <c10/util/Exception.h>

#include <string>
#include <utility>

#include "acl_device_guard.h"
#include "acl_table.h"
#include "env.h"
#include "ipc_event.h"

namespace torch_npu_ipc {
namespace {

std::chrono::milliseconds export_grace() {
  static const auto grace = std::chrono::milliseconds(env_int("TORCH_NPU_IPC_EXPORT_GRACE_MS", 5000, 1000000000000));
  return grace;
}

}  // namespace

EventManager& EventManager::get() {
  // Never destroyed on purpose: pooled events must not be torn down during
  // static destruction, after torch_npu may have finalized the runtime.
  static EventManager* instance = std::make_unique<EventManager>(Token{}).release();
  return *instance;
}

bool EventManager::drained(const Retired& r, bool force) const {
  if (!force && std::chrono::steady_clock::now() < r.not_before) return false;
  auto query = acl().QueryEventStatus;
  auto sync = acl().SynchronizeEvent;
  for (aclrtEvent fence : r.fences) {
    if (force) {
      if (sync != nullptr) (void)handled(sync(fence));
      continue;
    }
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    if (query == nullptr || handled(query(fence, &status)) != ACL_SUCCESS ||
        status != ACL_EVENT_RECORDED_STATUS_COMPLETE) {
      return false;
    }
  }
  return true;
}

void EventManager::destroy(const Retired& r) noexcept {
  auto destroy = acl().DestroyEvent;
  if (destroy == nullptr) return;
  try {
    AclDeviceGuard guard(r.device);
    for (aclrtEvent fence : r.fences) (void)handled(destroy(fence));
    (void)handled(destroy(r.event));
    ++stats_.destroyed;
  } catch (...) {
    // The device cannot be selected any more (the runtime is going away):
    // its teardown reclaims the events. Never throw: an IpcEvent's
    // destructor gets here through retire().
  }
}

void EventManager::retire(aclrtEvent event, c10::DeviceIndex device, std::vector<aclrtEvent> fences, bool exported) {
  auto not_before = std::chrono::steady_clock::now();
  if (exported) not_before += export_grace();
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired_.push_back(Retired{event, device, std::move(fences), not_before});
  }
  collect(false);
}

size_t EventManager::collect(bool force) {
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<Retired> keep;
  size_t destroyed = 0;
  for (auto& r : retired_) {
    if (drained(r, force)) {
      destroy(r);
      ++destroyed;
    } else {
      keep.push_back(std::move(r));
    }
  }
  retired_.swap(keep);
  return destroyed;
}

std::shared_ptr<IpcEvent> EventManager::acquire(c10::DeviceIndex device) {
  std::string exhausted;
  auto ev = try_acquire(device, &exhausted);
  TORCH_CHECK(ev != nullptr, exhausted);
  return ev;
}

std::shared_ptr<IpcEvent> EventManager::try_acquire(c10::DeviceIndex device, std::string* exhausted) {
  IpcEvent::check_device(device);  // before it indexes the pools
  std::shared_ptr<IpcEvent> owned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pools_.size() <= static_cast<size_t>(device)) pools_.resize(device + 1);
    auto& pool = pools_[device];
    if (!pool.empty()) {
      owned = std::move(pool.back());
      pool.pop_back();
    }
  }
  if (owned == nullptr) owned = IpcEvent::try_create(device, exhausted);
  if (owned == nullptr) return nullptr;
  IpcEvent* raw = owned.get();
  // The caller's handle returns the event to the pool instead of freeing it.
  return std::shared_ptr<IpcEvent>(raw, [this, owned, device](IpcEvent*) mutable {
    try {
      std::lock_guard<std::mutex> lock(mu_);
      pools_[device].push_back(std::move(owned));
    } catch (...) {
      // Out of memory in a deleter: destroy the event instead of pooling it.
    }
  });
}

EventStats EventManager::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  EventStats s = stats_;
  s.retired_pending = retired_.size();
  s.pooled = 0;
  for (const auto& p : pools_) s.pooled += p.size();
  return s;
}

}  // namespace torch_npu_ipc
