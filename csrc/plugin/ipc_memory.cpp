#include "ipc_memory.h"

#include <c10/util/Exception.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "acl_device_guard.h"
#include "acl_table.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"

namespace torch_npu_ipc {
namespace {

constexpr const char* kFeature = "Sharing NPU tensors between processes";

// Export flag: receivers are not known in advance (queues, sockets), so pid
// validation is disabled, as torch_npu does.
constexpr uint64_t kExportFlags = ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION;

// Segments the allocator gave back to the runtime on `device`. Zeroed by
// reset_accumulated_memory_stats.
int64_t segments_freed(c10::DeviceIndex device) {
  auto stats = c10_npu::NPUCachingAllocator::getDeviceStats(device);
  return stats.segment[static_cast<size_t>(c10_npu::NPUCachingAllocator::StatType::AGGREGATE)].freed;
}

using SegmentId = std::tuple<int, uintptr_t, size_t>;  // device, base, size

SegmentId segment_id(c10::DeviceIndex device, void* base, size_t size) {
  return std::make_tuple(static_cast<int>(device), reinterpret_cast<uintptr_t>(base), size);
}

struct ExportCache {
  std::mutex mu;
  std::map<SegmentId, std::string> keys;
  std::map<SegmentId, int64_t> pins;  // shared blocks per segment
  // Without a trace tracker: per device, segments freed when keys were last
  // checked.
  std::map<int, int64_t> freed_seen;
};

// Both caches are never destroyed: storages (and their pins and imports)
// may die during interpreter shutdown, after static destructors ran, and
// closing keys then would call a runtime that is already finalized.
ExportCache& exports() {
  static ExportCache* c = std::make_unique<ExportCache>().release();
  return *c;
}

struct ImportCache {
  std::mutex mu;
  // An expired entry names an import being closed: its destructor erases
  // the entry once the key is closed, and signals `closed`. A new import of
  // the key waits for that, so a late close never unmaps the new mapping.
  std::condition_variable closed;
  std::map<std::pair<std::string, int>, std::weak_ptr<Import>> map;
  // The most recent imports stay mapped after their last storage died:
  // producers send from a few allocator segments over and over, and an
  // import costs a round trip to the exporter plus a mapping.
  std::deque<std::shared_ptr<Import>> recent;
};
constexpr size_t kRecentImports = 64;

ImportCache& imports() {
  static ImportCache* c = std::make_unique<ImportCache>().release();
  return *c;
}

// Closes and forgets the cached keys that the predicate picks. With the
// cache's lock held.
template <typename Pred>
void drop_keys(ExportCache& c, Pred pick) {
  auto close = acl().IpcMemClose;
  for (auto k = c.keys.begin(); k != c.keys.end();) {
    if (pick(k->first)) {
      if (close != nullptr) (void)close(k->second.c_str());
      k = c.keys.erase(k);
    } else {
      ++k;
    }
  }
}

// The allocator of newer torch_npu (2.13; not 2.7.1 or 2.6.0 from PyPI)
// reports each segment it gives back to the runtime to attached trace
// trackers; the key of that segment is closed then, before the free (as
// torch_npu closes its own IPC handles). Older torch_npu has no trackers:
// export_block compares segment counters instead.
// The tracker runs with the device's allocator lock held and takes the
// cache's lock; so nothing here calls the allocator with the cache's lock
// held. Attached by the first export, so a process that never shares pays
// nothing on its allocations.
template <typename Allocator>
auto attach_tracker(Allocator* allocator, int) -> decltype(allocator->attachAllocatorTraceTracker(nullptr), bool()) {
  allocator->attachAllocatorTraceTracker([](const auto& e) {
    using Entry = std::decay_t<decltype(e)>;
    if (e.action_ != Entry::SEGMENT_FREE && e.action_ != Entry::SEGMENT_UNMAP) return;
    const auto lo = static_cast<uintptr_t>(e.addr_);
    const auto hi = lo + static_cast<uintptr_t>(e.size_);
    ExportCache& c = exports();
    std::lock_guard<std::mutex> lock(c.mu);
    drop_keys(c, [device = e.device_, lo, hi](const SegmentId& id) {
      const uintptr_t base = std::get<1>(id);
      return std::get<0>(id) == device && base < hi && lo < base + std::get<2>(id);  // the freed range overlaps it
    });
  });
  return true;
}
template <typename Allocator>
bool attach_tracker(Allocator*, long) {
  return false;
}

}  // namespace

void export_keys_forget() {
  ExportCache& c = exports();
  std::lock_guard<std::mutex> lock(c.mu);
  drop_keys(c, [&c](const SegmentId& id) { return c.pins.count(id) == 0; });
  c.freed_seen.clear();  // the next export of each device starts counting afresh
}

bool export_keys_tracked() {
  static const bool attached = attach_tracker(c10_npu::NPUCachingAllocator::get(), 0);
  return attached;
}

ExportedBlock export_block(c10::DeviceIndex device, void* ptr) {
  auto get_key = NPU_IPC_ACL(IpcMemGetExportKey, kFeature);
  NPU_IPC_ACL(IpcMemClose, kFeature);  // required: cached keys are closed when their segments are freed
  size_t size = 0;
  void* base = c10_npu::NPUCachingAllocator::get()->getBaseAllocation(ptr, &size);
  TORCH_CHECK(base != nullptr && size > 0, "torch_npu_ipc: storage at ", ptr,
              " was not allocated by torch_npu's caching allocator, so it cannot be shared");
  // Read before the cache's lock (see attach_tracker) and after the segment
  // was looked up: a free that made room for this segment is counted.
  const bool by_tracker = export_keys_tracked();
  const int64_t freed = by_tracker ? 0 : segments_freed(device);
  ExportCache& c = exports();
  std::lock_guard<std::mutex> lock(c.mu);
  if (!by_tracker) {
    // Some segment of this device went back to the runtime: drop the keys
    // that might name it. A pinned segment still holds a shared block, so
    // it was not freed, and its key stays valid for descriptors in flight.
    if (auto it = c.freed_seen.find(device); it != c.freed_seen.end() && it->second != freed) {
      drop_keys(c, [&c, device](const SegmentId& id) { return std::get<0>(id) == device && c.pins.count(id) == 0; });
    }
    c.freed_seen[device] = freed;
  }
  auto id = segment_id(device, base, size);
  auto it = c.keys.find(id);
  if (it == c.keys.end()) {
    AclDeviceGuard guard(device);
    char key[kIpcKeySize] = {};
    check(get_key(base, size, key, sizeof(key), kExportFlags), "aclrtIpcMemGetExportKey");
    it = c.keys.emplace(id, std::string(key, strnlen(key, sizeof(key)))).first;
  }
  return ExportedBlock{it->second, base, size, std::make_unique<ExportPin>(ExportPin::Token{}, device, base, size)};
}

// Made by export_block with the cache's lock held, so no other thread's
// invalidation pass can close the key between its lookup and the pin.
ExportPin::ExportPin(Token, c10::DeviceIndex device, void* base, size_t size)
    : device_(device), base_(base), size_(size) {
  ++exports().pins[segment_id(device_, base_, size_)];
}

ExportPin::~ExportPin() {
  ExportCache& c = exports();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.pins.find(segment_id(device_, base_, size_));
  if (it != c.pins.end() && --it->second == 0) c.pins.erase(it);
}

std::shared_ptr<Import> Import::get(const std::string& key, c10::DeviceIndex device, c10::DeviceIndex producer_device) {
  auto import = NPU_IPC_ACL(IpcMemImportByKey, kFeature);
  NPU_IPC_ACL(IpcMemClose, kFeature);
  TORCH_CHECK_VALUE(!key.empty() && key.size() < kIpcKeySize, "malformed IPC memory key");
  ImportCache& c = imports();
  // Declared before the lock: an import dropped here closes after it is released (~Import takes it).
  std::shared_ptr<Import> imp;
  std::shared_ptr<Import> evicted;
  std::unique_lock<std::mutex> lock(c.mu);
  const auto id = std::make_pair(key, static_cast<int>(device));
  for (auto it = c.map.find(id); it != c.map.end(); it = c.map.find(id)) {
    if (auto existing = it->second.lock()) return existing;
    c.closed.wait(lock);  // its last holder is closing it
  }
  AclDeviceGuard guard(device);
  void* p = nullptr;
  uint64_t flags = device != producer_device ? ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS : 0;
  check(import(&p, key.c_str(), flags), "aclrtIpcMemImportByKey");
  imp = std::make_shared<Import>(Token{}, key, p, device);
  c.map[id] = imp;
  c.recent.push_back(imp);
  if (c.recent.size() > kRecentImports) {
    evicted = std::move(c.recent.front());
    c.recent.pop_front();
  }
  return imp;
}

Import::Import(Token, std::string key, void* ptr, c10::DeviceIndex device)
    : key_(std::move(key)), ptr_(ptr), device_(device) {}

Import::~Import() {
  if (auto close = acl().IpcMemClose; close != nullptr) {
    try {
      AclDeviceGuard guard(device_);
      close(key_.c_str());
    } catch (...) {
      // A destructor must not throw; the exporter reclaims the key anyway.
    }
  }
  ImportCache& c = imports();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.map.find(std::make_pair(key_, static_cast<int>(device_)));
    if (it != c.map.end() && it->second.expired()) c.map.erase(it);
  }
  c.closed.notify_all();
}

}  // namespace torch_npu_ipc
