// IPC memory: producer-side export keys for caching-allocator segments and
// consumer-side imports, both cached.
//
// Producer: one ACL key per (device, segment base, size). A key never names
// freed memory: the allocator frees segments only in empty_cache or on OOM,
// and newer torch_npu (2.13) reports each free to a trace tracker, which closes
// that segment's key. Older torch_npu reports nothing: when the device's
// count of freed segments moved, every cached key of that device that no
// ExportPin holds is closed and re-exported on next use. A pinned key stays:
// its segment holds a block still shared, so it cannot have been freed, and
// receivers of descriptors in flight still import it. The count is zeroed by
// reset_accumulated_memory_stats, which could hide a free: the Python layer
// wraps torch_npu's reset there to call export_keys_forget.
// Consumer: one import per (key, device), shared by every storage rebuilt
// from it; the most recent (TORCH_NPU_IPC_KEPT_IMPORTS, default 64) stay
// mapped after their last storage died, older ones are closed when their
// last storage is gone. The runtime's aclrtIpcMemClose(key) unmaps the
// process's OLDEST import of the key (CANN keeps one list per key, whatever
// the device), so closes follow import order, and a key this process
// exported is closed only once it holds no import of it (a tensor it sent
// itself), or the close would unmap that import instead.
#pragma once

#include "acl_abi.h"
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace torch_npu_ipc {

constexpr size_t kIpcKeySize = 65;

struct ExportedBlock;

// Keeps the cached key of a block's segment open while the block is shared
// (held by the producer's context of a shared storage).
class ExportPin {
  struct Token {};

 public:
  ExportPin(Token, c10::DeviceIndex device, void* base, size_t size);  // only export_block makes pins
  ~ExportPin();
  ExportPin(const ExportPin&) = delete;
  ExportPin& operator=(const ExportPin&) = delete;

 private:
  friend ExportedBlock export_block(c10::DeviceIndex device, void* ptr);
  c10::DeviceIndex device_;
  void* base_;
  size_t size_;
};

struct ExportedBlock {
  std::string key;                  // ACL IPC key (NUL-trimmed)
  void* base = nullptr;             // segment base
  size_t size = 0;                  // bytes exported
  std::unique_ptr<ExportPin> pin;   // keeps `key` open while held
};

// True when torch_npu's allocator reports segment frees to the key cache (a
// trace tracker, as torch_npu 2.13's; attached by the first call).
bool export_keys_tracked();

// Without a trace tracker: closes every cached key that no ExportPin holds
// and forgets the counts of freed segments. Called around
// reset_accumulated_memory_stats, which zeroes those counts and could
// otherwise hide a free.
void export_keys_forget();

// Export key of the allocator segment holding `ptr` on `device`, pinned:
// the key stays valid while the returned pin (or a pin moved out of it) lives.
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
