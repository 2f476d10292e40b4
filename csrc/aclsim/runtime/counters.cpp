// Per-process call counters. Tests read them (aclsim.counters()) to prove
// that a code path did, or did not, block the host or use an event.
#include "aclsim/runtime.h"

#include <array>
#include <atomic>
#include <cstring>

namespace aclsim {
namespace {

constexpr int kCount = static_cast<int>(Counter::kCount);

constexpr std::array<const char*, kCount> kNames = {
    "aclrtSynchronizeStream",
    "aclrtSynchronizeEvent",
    "aclrtSynchronizeDevice",
    "aclrtStreamWaitEvent",
    "aclrtRecordEvent",
    "aclrtQueryEventStatus",
    "event_create",
    "event_destroy",
    "memcpy_host_to_host",
    "memcpy_host_to_device",
    "memcpy_device_to_host",
    "memcpy_device_to_device",
    "memcpy_inter_device",
    "ipc_event_create",
    "ipc_event_open",
    "ipc_event_destroy",
    "ipc_event_get_handle",
    "ipc_mem_export",
    "ipc_mem_import",
    "ipc_mem_close",
    "device_malloc",
    "device_free",
    "stream_create",
    "stream_destroy",
    "op_launch",
};

std::array<std::atomic<uint64_t>, kCount> g_values{};

}  // namespace

void count(Counter c, uint64_t n) {
  g_values[static_cast<int>(c)].fetch_add(n, std::memory_order_relaxed);
}

const char* counter_name(Counter c) { return kNames[static_cast<int>(c)]; }

uint64_t counter_value(Counter c) {
  return g_values[static_cast<int>(c)].load(std::memory_order_relaxed);
}

}  // namespace aclsim

// C entry points for the Python helper (ctypes).
extern "C" {

ACLSIM_API int aclsimCounterCount() { return aclsim::kCount; }

ACLSIM_API const char* aclsimCounterName(int index) {
  if (index < 0 || index >= aclsim::kCount) return nullptr;
  return aclsim::kNames[index];
}

ACLSIM_API uint64_t aclsimCounterValue(int index) {
  if (index < 0 || index >= aclsim::kCount) return 0;
  return aclsim::g_values[index].load(std::memory_order_relaxed);
}

ACLSIM_API void aclsimResetCounters() {
  for (auto& v : aclsim::g_values) v.store(0, std::memory_order_relaxed);
}

}  // extern "C"
