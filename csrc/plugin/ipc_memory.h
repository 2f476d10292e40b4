// IPC memory: producer-side export keys for caching-allocator segments and
// consumer-side imports, both cached.
//
// Producer: one ACL key per (device, segment base, size). A key outlives
// nothing: when the allocator frees any segment of the device (it only does
// so in empty_cache or on OOM), all cached keys of that device are closed
// and re-exported on next use, so a key never names freed memory.
// Consumer: one import per (key, device), shared by every storage rebuilt
// from it; the 64 most recent stay mapped after their last storage died,
// older ones are closed when their last storage is gone.
#pragma once

#include "acl_abi.h"
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace torch_npu_ipc {

constexpr size_t kIpcKeySize = 65;

struct ExportedBlock {
  std::string key;       // ACL IPC key (NUL-trimmed)
  void* base = nullptr;  // segment base
  size_t size = 0;       // bytes exported
};

// Export key of the allocator segment holding `ptr` on `device`.
ExportedBlock export_block(c10::DeviceIndex device, void* ptr);

// An imported block; closes its key when the last user drops it.
class Import {
  struct Token {};

 public:
  static std::shared_ptr<Import> get(const std::string& key, c10::DeviceIndex device, c10::DeviceIndex producer_device);
  Import(Token, std::string key, void* ptr, c10::DeviceIndex device);
  ~Import();
  Import(const Import&) = delete;
  Import& operator=(const Import&) = delete;

  void* ptr() const { return ptr_; }
  c10::DeviceIndex device() const { return device_; }
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  void* ptr_;
  c10::DeviceIndex device_;
};

}  // namespace torch_npu_ipc
