// Simulated device memory and the registry of every allocation the process
// can address (its own device memory, pinned host memory, imported IPC
// memory).
//
// Device memory is a memfd mapped MAP_SHARED, so another process that
// receives the descriptor (see broker.h) maps the very same bytes: that is
// what makes IPC memory real under the simulator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "aclsim/runtime.h"

namespace aclsim {

enum class MemKind { Device, Host, Imported };

class Allocation {
 public:
  Allocation(MemKind kind, int device, void* base, size_t size, int fd);
  ~Allocation();  // unmaps, closes the descriptor
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  MemKind kind() const { return kind_; }
  int device() const { return device_; }
  uintptr_t base() const { return reinterpret_cast<uintptr_t>(base_); }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  bool contains(const void* p, size_t bytes) const;

 private:
  MemKind kind_;
  int device_;
  void* base_;
  size_t size_;
  int fd_;
};

size_t page_size();

// The live allocation holding [p, p + bytes), or nullptr.
std::shared_ptr<Allocation> find_allocation(const void* p, size_t bytes);

// Maps `size` bytes of `fd` at `offset` as memory imported on `device`,
// registers it, and returns its address (nullptr and an error on failure).
// Takes ownership of fd.
void* map_imported(int fd, size_t offset, size_t size, int device, aclError* err);

// Unregisters and unmaps an imported mapping that starts at `base`.
aclError unmap_imported(void* base);

// The device a device pointer belongs to, or -1 for host/unknown memory.
int device_of(const void* p);

}  // namespace aclsim
