#include "memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <shared_mutex>
#include <vector>

#include "device.h"
#include "no_destructor.h"
#include "stream.h"

namespace aclsim {
namespace {

class Registry {
 public:
  void add(std::shared_ptr<Allocation> a) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    map_[a->base()] = std::move(a);
  }
  std::shared_ptr<Allocation> remove(const void* base, MemKind kind) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = map_.find(reinterpret_cast<uintptr_t>(base));
    if (it == map_.end() || it->second->kind() != kind) return nullptr;
    auto a = std::move(it->second);
    map_.erase(it);
    return a;
  }
  std::shared_ptr<Allocation> find(const void* p, size_t bytes) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = map_.upper_bound(reinterpret_cast<uintptr_t>(p));
    if (it == map_.begin()) return nullptr;
    --it;
    return it->second->contains(p, bytes) ? it->second : nullptr;
  }

 private:
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, std::shared_ptr<Allocation>> map_;
};

Registry& registry() {
  static NoDestructor<Registry> r;
  return *r;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

aclError device_malloc(void** out, size_t size) {
  if (out == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: devPtr is null");
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: size is 0");
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  const size_t bytes = round_up(size, page_size());
  Device& d = device(dev);
  size_t used = d.used_bytes.fetch_add(bytes);
  if (used + bytes > config().device_memory) {
    d.used_bytes.fetch_sub(bytes);
    return fail(ACL_ERROR_RT_MEMORY_ALLOCATION,
                "out of simulated device memory on device " + std::to_string(dev) + " (" +
                    std::to_string(config().device_memory >> 20) + " MiB; set ACLSIM_DEVICE_MEMORY_MB)");
  }
  int fd = memfd_create("aclsim-device-memory", MFD_CLOEXEC);
  void* p = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    if (fd >= 0) close(fd);
    d.used_bytes.fetch_sub(bytes);
    return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, std::string("device memory: ") + std::strerror(errno));
  }
  registry().add(std::make_shared<Allocation>(MemKind::Device, dev, p, bytes, fd));
  count(Counter::DeviceMalloc);
  *out = p;
  return ACL_SUCCESS;
}

bool is_device_kind(MemKind k) { return k == MemKind::Device || k == MemKind::Imported; }

// Checks one side of a copy; `side` names it in messages.
aclError check_side(const void* p, size_t count, bool want_device, const char* side, int* dev) {
  *dev = -1;
  if (p == nullptr) return fail(ACL_ERROR_INVALID_PARAM, std::string("memcpy: ") + side + " is null");
  auto a = find_allocation(p, count);
  if (want_device) {
    if (a == nullptr || !is_device_kind(a->kind())) {
      return fail(ACL_ERROR_RT_PARAM_INVALID, std::string("memcpy: ") + side + " is not a live device range of " +
                                                  std::to_string(count) + " bytes");
    }
    *dev = a->device();
  } else if (a != nullptr && is_device_kind(a->kind())) {
    return fail(ACL_ERROR_RT_PARAM_INVALID,
                std::string("memcpy: ") + side + " is device memory but the copy kind says host");
  }
  return ACL_SUCCESS;
}

struct CopyPlan {
  Counter counter;
  bool src_is_pageable_host = false;
};

aclError plan_copy(void* dst, size_t dest_max, const void* src, size_t count, aclrtMemcpyKind kind, CopyPlan* plan) {
  if (count > dest_max) return fail(ACL_ERROR_INVALID_PARAM, "memcpy: count exceeds destMax");
  if (kind == ACL_MEMCPY_DEFAULT) {
    auto d = find_allocation(dst, count);
    auto s = find_allocation(src, count);
    bool dd = d != nullptr && is_device_kind(d->kind());
    bool sd = s != nullptr && is_device_kind(s->kind());
    kind = dd ? (sd ? ACL_MEMCPY_DEVICE_TO_DEVICE : ACL_MEMCPY_HOST_TO_DEVICE)
              : (sd ? ACL_MEMCPY_DEVICE_TO_HOST : ACL_MEMCPY_HOST_TO_HOST);
  }
  int sdev = -1, ddev = -1;
  aclError rc = ACL_SUCCESS;
  const auto check_sides = [&](bool src_on_device, bool dst_on_device) {
    const aclError e = check_side(src, count, src_on_device, "src", &sdev);
    return e != ACL_SUCCESS ? e : check_side(dst, count, dst_on_device, "dst", &ddev);
  };
  switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST:
      plan->counter = Counter::MemcpyHostToHost;
      if ((rc = check_sides(false, false))) return rc;
      break;
    case ACL_MEMCPY_HOST_TO_DEVICE:
    case ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE:
      plan->counter = Counter::MemcpyHostToDevice;
      if ((rc = check_sides(false, true))) return rc;
      {
        auto s = find_allocation(src, count);
        plan->src_is_pageable_host = s == nullptr;
      }
      break;
    case ACL_MEMCPY_DEVICE_TO_HOST:
      plan->counter = Counter::MemcpyDeviceToHost;
      if ((rc = check_sides(true, false))) return rc;
      break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE:
    case ACL_MEMCPY_INNER_DEVICE_TO_DEVICE:
    case ACL_MEMCPY_INTER_DEVICE_TO_DEVICE:
      if ((rc = check_sides(true, true))) return rc;
      plan->counter = sdev == ddev ? Counter::MemcpyDeviceToDevice : Counter::MemcpyInterDevice;
      if (!peer_accessible(sdev, ddev)) {
        return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                    "memcpy between device " + std::to_string(sdev) + " and device " + std::to_string(ddev) +
                        " without peer access: call aclrtDeviceEnablePeerAccess first");
      }
      break;
    default:
      return fail(ACL_ERROR_INVALID_PARAM, "memcpy: unknown copy kind " + std::to_string(static_cast<int>(kind)));
  }
  return ACL_SUCCESS;
}

}  // namespace

Allocation::Allocation(MemKind kind, int device, void* base, size_t size, int fd)
    : kind_(kind), device_(device), base_(base), size_(size), fd_(fd) {}

Allocation::~Allocation() {
  munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

bool Allocation::contains(const void* p, size_t bytes) const {
  auto x = reinterpret_cast<uintptr_t>(p);
  return x >= base() && bytes <= size_ && x - base() <= size_ - bytes;
}

size_t page_size() {
  static const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return ps;
}

std::shared_ptr<Allocation> find_allocation(const void* p, size_t bytes) { return registry().find(p, bytes); }

bool is_device_range(const void* p, size_t bytes) {
  auto a = find_allocation(p, bytes);
  return a != nullptr && is_device_kind(a->kind());
}

int device_of(const void* p) {
  auto a = find_allocation(p, 1);
  return a != nullptr && is_device_kind(a->kind()) ? a->device() : -1;
}

void* map_imported(int fd, size_t offset, size_t size, int device, aclError* err) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    close(fd);
    *err = fail(ACL_ERROR_RT_MEMORY_ALLOCATION, std::string("mapping imported memory: ") + std::strerror(errno));
    return nullptr;
  }
  registry().add(std::make_shared<Allocation>(MemKind::Imported, device, p, size, fd));
  *err = ACL_SUCCESS;
  return p;
}

aclError unmap_imported(void* base) {
  if (registry().remove(base, MemKind::Imported) == nullptr) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "not an imported IPC mapping");
  }
  return ACL_SUCCESS;
}

}  // namespace aclsim

using namespace aclsim;

extern "C" {

ACLSIM_API aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy /*policy*/) {
  return device_malloc(devPtr, size);
}

ACLSIM_API aclError aclrtMallocAlign32(void** devPtr, size_t size, aclrtMemMallocPolicy /*policy*/) {
  return device_malloc(devPtr, size);
}

ACLSIM_API aclError aclrtFree(void* devPtr) {
  auto a = find_allocation(devPtr, 1);
  if (a == nullptr || a->kind() != MemKind::Device || a->base() != reinterpret_cast<uintptr_t>(devPtr)) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtFree: not the start of a live device allocation");
  }
  // As on hardware, freeing device memory waits for the device's queued work.
  synchronize_device(a->device(), -1);
  registry().remove(devPtr, MemKind::Device);
  device(a->device()).used_bytes.fetch_sub(a->size());
  count(Counter::DeviceFree);
  return ACL_SUCCESS;  // unmapped when the last user (e.g. a queued copy) lets go
}

ACLSIM_API aclError aclrtMallocHost(void** hostPtr, size_t size) {
  if (hostPtr == nullptr || size == 0) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost: null pointer or size 0");
  size_t bytes = round_up(size, page_size());
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMallocHost: out of host memory");
  registry().add(std::make_shared<Allocation>(MemKind::Host, -1, p, bytes, -1));
  *hostPtr = p;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtFreeHost(void* hostPtr) {
  if (registry().remove(hostPtr, MemKind::Host) == nullptr) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtFreeHost: not the start of a live pinned host allocation");
  }
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
  CopyPlan plan{};
  if (aclError rc = plan_copy(dst, destMax, src, count, kind, &plan); rc != ACL_SUCCESS) return rc;
  aclsim::count(plan.counter);
  if (count != 0) std::memmove(dst, src, count);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind,
                                     aclrtStream stream) {
  CopyPlan plan{};
  if (aclError rc = plan_copy(dst, destMax, src, count, kind, &plan); rc != ACL_SUCCESS) return rc;
  aclError err = ACL_SUCCESS;
  auto s = resolve_work_stream(stream, "aclrtMemcpyAsync", &err);
  if (s == nullptr) return err;
  aclsim::count(plan.counter);
  // Keep device allocations alive until the copy ran, even if freed meanwhile.
  auto keep_dst = find_allocation(dst, count);
  auto keep_src = find_allocation(src, count);
  if (plan.src_is_pageable_host) {
    // Pageable host memory may be reused as soon as the call returns.
    auto snapshot = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                                 static_cast<const unsigned char*>(src) + count);
    return s->enqueue("aclrtMemcpyAsync", [dst, snapshot, keep_dst] {
      if (!snapshot->empty()) std::memcpy(dst, snapshot->data(), snapshot->size());
      return ACL_SUCCESS;
    });
  }
  return s->enqueue("aclrtMemcpyAsync", [dst, src, count, keep_dst, keep_src] {
    if (count != 0) std::memmove(dst, src, count);
    return ACL_SUCCESS;
  });
}

ACLSIM_API aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  if (count > maxCount) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: count exceeds maxCount");
  if (count != 0 && !is_device_range(devPtr, count)) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemset: not a live device range");
  }
  if (count != 0) std::memset(devPtr, value, count);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream) {
  if (count > maxCount) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemsetAsync: count exceeds maxCount");
  auto keep = find_allocation(devPtr, count);
  if (count != 0 && (keep == nullptr || !is_device_kind(keep->kind()))) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemsetAsync: not a live device range");
  }
  return enqueue(stream, "aclrtMemsetAsync", [devPtr, value, count, keep] {
    if (count != 0) std::memset(devPtr, value, count);
    return ACL_SUCCESS;
  });
}

ACLSIM_API aclError aclrtGetMemInfo(aclrtMemAttr /*attr*/, size_t* free, size_t* total) {
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  if (free == nullptr || total == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: null output");
  *total = config().device_memory;
  size_t used = device(dev).used_bytes.load();
  *free = used >= *total ? 0 : *total - used;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtPointerGetAttributes(const void* ptr, aclrtPtrAttributes* attributes) {
  if (attributes == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtPointerGetAttributes: null output");
  std::memset(attributes, 0, sizeof(*attributes));
  auto a = find_allocation(ptr, 1);
  attributes->pageSize = static_cast<uint32_t>(page_size());
  if (a == nullptr) {
    attributes->location.type = ACL_MEM_LOCATION_TYPE_UNREGISTERED;
  } else if (a->kind() == MemKind::Host) {
    attributes->location.type = ACL_MEM_LOCATION_TYPE_HOST;
  } else {
    attributes->location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    attributes->location.id = static_cast<uint32_t>(a->device());
  }
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtDeviceCanAccessPeer(int32_t* canAccessPeer, int32_t deviceId, int32_t peerDeviceId) {
  if (canAccessPeer == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtDeviceCanAccessPeer: null output");
  if (!valid_device(deviceId) || !valid_device(peerDeviceId)) {
    return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtDeviceCanAccessPeer: invalid device id");
  }
  // As CANN (aclrtDeviceCanAccessPeerImpl): a device is no peer of itself.
  if (deviceId == peerDeviceId) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtDeviceCanAccessPeer: deviceId == peerDeviceId");
  }
  *canAccessPeer = 1;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags) {
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  // As CANN (aclrtDeviceEnablePeerAccessImpl): flags are reserved, and a
  // device is no peer of itself.
  if (flags != 0) return fail(ACL_ERROR_FEATURE_UNSUPPORTED, "aclrtDeviceEnablePeerAccess: flags must be 0");
  if (peerDeviceId == dev) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtDeviceEnablePeerAccess: peer is the current device");
  }
  if (!valid_device(peerDeviceId)) {
    return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtDeviceEnablePeerAccess: invalid peer device id");
  }
  device(dev).peer_enabled[peerDeviceId] = true;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtDeviceDisablePeerAccess(int32_t peerDeviceId) {
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  if (!valid_device(peerDeviceId)) return fail(ACL_ERROR_RT_INVALID_DEVICEID, "invalid peer device id");
  device(dev).peer_enabled[peerDeviceId] = false;
  return ACL_SUCCESS;
}

}  // extern "C"
