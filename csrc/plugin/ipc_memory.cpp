#include "ipc_memory.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "acl_device_guard.h"
#include "acl_table.h"
#include "env.h"
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

// One import as the runtime lists it (see ImportCache::order).
struct Mapping {
  void* ptr;                 // a mapped address is unique while mapped
  c10::DeviceIndex device;   // made current for its close
  bool dead;                 // its Import is gone; closed once it is the oldest
};

struct ImportCache {
  std::mutex mu;
  // Live imports by (key, device): every storage rebuilt from one shares it.
  std::map<std::pair<std::string, int>, std::weak_ptr<Import>> map;
  // Per key, this process's mappings, oldest first, as the runtime lists
  // them: aclrtIpcMemClose(key) unmaps the OLDEST mapping of the key, not
  // the caller's (CANN's runtime keeps one list per key, whatever the device
  // of each import). So a dead import is marked, and closes run only from
  // the front: each close then unmaps the mapping it is meant for, and a
  // mapping still in use on another device is never the one unmapped.
  std::map<std::string, std::deque<Mapping>> order;
  // The most recent imports stay mapped after their last storage died:
  // producers send from a few allocator segments over and over, and an
  // import costs a round trip to the exporter plus a mapping.
  std::deque<std::shared_ptr<Import>> recent;
};
// How many imports stay mapped after their last storage died
// (TORCH_NPU_IPC_KEPT_IMPORTS; 0 closes each with its last storage, as
// torch_npu does).
size_t kept_imports() {
  static const auto n = static_cast<size_t>(env_int("TORCH_NPU_IPC_KEPT_IMPORTS", 64, 4096));
  return n;
}

ImportCache& imports() {
  static ImportCache* c = std::make_unique<ImportCache>().release();
  return *c;
}

// Before this process closes a key it exported: the runtime's close of a key
// unmaps the process's own imports of it first (a tensor it sent to itself)
// and retracts the export only when there are none. Lets go of the kept
// imports of `key`; true when none is left, so a close now retracts.
bool release_own_imports(const std::string& key) {
  ImportCache& c = imports();
  std::vector<std::shared_ptr<Import>> released;  // dropped after the lock: ~Import takes it
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.order.count(key) == 0) return true;
    for (auto it = c.recent.begin(); it != c.recent.end();) {
      if ((*it)->key() == key) {
        released.push_back(std::move(*it));
        it = c.recent.erase(it);
      } else {
        ++it;
      }
    }
  }
  released.clear();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.order.count(key) == 0;
}

// Closes and forgets the cached keys that the predicate picks. With the
// cache's lock held.
template <typename Pred>
void drop_keys(ExportCache& c, Pred pick) {
  auto close = acl().IpcMemClose;
  for (auto k = c.keys.begin(); k != c.keys.end();) {
    if (pick(k->first)) {
      // A self-import still in use would take the close instead of the
      // export: not reached (its slot keeps the segment, and so the key,
      // pinned), and then the key is left open rather than unmap it.
      if (close != nullptr && release_own_imports(k->second)) (void)handled(close(k->second.c_str()));
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
  void* base = nullptr;
  try {
    base = c10_npu::NPUCachingAllocator::get()->getBaseAllocation(ptr, &size);
  } catch (const c10::Error&) {
    base = nullptr;  // torch_npu's "invalid device pointer": not a block of its cache
  }
  if (base == nullptr || size == 0) {
    const char* uncached = std::getenv("PYTORCH_NO_NPU_MEMORY_CACHING");
    TORCH_CHECK(uncached == nullptr || std::string(uncached) != "1", "torch_npu_ipc: cannot share the storage at ",
                ptr, ": PYTORCH_NO_NPU_MEMORY_CACHING=1 turned torch_npu's caching allocator off, and sharing exports "
                "that allocator's memory blocks. Unset PYTORCH_NO_NPU_MEMORY_CACHING in the process that sends NPU "
                "tensors");
    TORCH_CHECK(false, "torch_npu_ipc: storage at ", ptr,
                " was not allocated by torch_npu's caching allocator, so it cannot be shared");
  }
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
  std::lock_guard<std::mutex> lock(c.mu);
  const auto id = std::make_pair(key, static_cast<int>(device));
  if (auto it = c.map.find(id); it != c.map.end()) {
    if (auto existing = it->second.lock()) return existing;
    // Else its last holder is in ~Import: this import is a new mapping, and
    // that one's close (from the front of `order`) will not touch it.
  }
  AclDeviceGuard guard(device);
  void* p = nullptr;
  uint64_t flags = device != producer_device ? ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS : 0;
  check(import(&p, key.c_str(), flags), "aclrtIpcMemImportByKey");  // with the lock: `order` is the runtime's order
  imp = std::make_shared<Import>(Token{}, key, p, device);
  c.map[id] = imp;
  c.order[key].push_back(Mapping{p, device, false});
  c.recent.push_back(imp);
  if (c.recent.size() > kept_imports()) {
    evicted = std::move(c.recent.front());
    c.recent.pop_front();
  }
  return imp;
}

Import::Import(Token, std::string key, void* ptr, c10::DeviceIndex device)
    : key_(std::move(key)), ptr_(ptr), device_(device) {}

Import::~Import() {
  ImportCache& c = imports();
  std::vector<c10::DeviceIndex> closes;  // devices of the oldest mappings, now unused
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.map.find(std::make_pair(key_, static_cast<int>(device_)));
        it != c.map.end() && it->second.expired()) {
      c.map.erase(it);
    }
    auto list = c.order.find(key_);
    if (list == c.order.end()) return;  // not reached: every import is listed
    std::deque<Mapping>& q = list->second;
    for (Mapping& m : q) {
      if (m.ptr == ptr_ && !m.dead) {
        m.dead = true;
        break;
      }
    }
    // Popped here, closed below without the lock: an import made meanwhile
    // is listed after these, so each close still unmaps one of them.
    while (!q.empty() && q.front().dead) {
      closes.push_back(q.front().device);
      q.pop_front();
    }
    if (q.empty()) c.order.erase(list);
  }
  auto close = acl().IpcMemClose;
  if (close == nullptr) return;
  for (c10::DeviceIndex device : closes) {
    try {
      AclDeviceGuard guard(device);
      (void)handled(close(key_.c_str()));
    } catch (...) {
      // A destructor must not throw; the exporter reclaims the key anyway.
    }
  }
}

}  // namespace torch_npu_ipc
