// Simulated devices: the per-thread current device, per-device state
// (default stream, memory in use, peer access) and device-wide sync.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>

#include "aclsim/runtime.h"
#include "config.h"

namespace aclsim {

struct Device {
  int id = 0;
  std::mutex mu;
  int open_count = 0;              // aclrtSetDevice minus aclrtResetDevice
  aclrtStream default_stream = nullptr;
  std::atomic<size_t> used_bytes{0};
  std::array<std::atomic<bool>, kMaxDevices> peer_enabled{};
  aclrtContext context = nullptr;  // token naming this device's context
};

// True for 0 <= id < device_count().
bool valid_device(int id);

// The device state of logical device `id` (must be valid).
Device& device(int id);

// The calling thread's current device, or -1 when none was set.
int current_device();
void set_current_device(int id);

// Current device of this thread, or fails with ACL_ERROR_RT_CONTEXT_NULL.
aclError require_current_device(int* id);

// Default stream of a device (opens the device when needed).
aclrtStream default_stream(int id);

// Waits for every stream of device `dev`; timeout_ms < 0 waits forever.
aclError synchronize_device(int dev, int32_t timeout_ms);

// Whether device `from` may access memory of device `to` (same device, or
// peer access enabled).
bool peer_accessible(int from, int to);

}  // namespace aclsim
