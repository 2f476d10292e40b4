#include "config.h"

#include <cstdlib>
#include <sstream>

#include "aclsim/runtime.h"

namespace aclsim {
namespace {

long env_long(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < lo || x > hi) return fallback;
  return x;
}

Config load() {
  Config c;
  c.physical_devices = static_cast<int>(env_long("ACLSIM_DEVICES", 2, 1, kMaxDevices));
  if (const char* soc = std::getenv("ACLSIM_SOC"); soc != nullptr && *soc != '\0') c.soc = soc;
  c.device_memory = static_cast<size_t>(env_long("ACLSIM_DEVICE_MEMORY_MB", 16384, 64, 1 << 20)) << 20;
  c.op_cost_seconds = static_cast<double>(env_long("ACLSIM_OP_COST_US", 0, 0, 10'000'000)) * 1e-6;
  c.launch_cost_seconds = static_cast<double>(env_long("ACLSIM_LAUNCH_COST_US", 0, 0, 10'000'000)) * 1e-6;
  c.jitter_us = env_long("ACLSIM_JITTER_US", 0, 0, 10'000'000);
  c.jitter_seed = static_cast<unsigned long>(env_long("ACLSIM_JITTER_SEED", 0, 0, 1L << 62));
  c.max_ipc_events = static_cast<int>(env_long("ACLSIM_MAX_IPC_EVENTS", kMaxIpcEvents, 1, kMaxIpcEvents));
  c.max_events = static_cast<int>(env_long("ACLSIM_MAX_EVENTS", kMaxEvents, 1, kMaxEvents));
  c.event_limit_error = static_cast<int>(env_long("ACLSIM_EVENT_LIMIT_ERROR", 207007, 100000, 599999));
  c.trace_events = env_long("ACLSIM_TRACE_EVENTS", 0, 0, 1) == 1;
  c.ipc_events = env_long("ACLSIM_IPC_EVENTS", 1, 0, 1) == 1;
  const char* vis = std::getenv("ASCEND_RT_VISIBLE_DEVICES");
  if (vis != nullptr && *vis != '\0') {
    std::stringstream ss(vis);
    std::string item;
    while (std::getline(ss, item, ',')) {
      char* end = nullptr;
      long id = std::strtol(item.c_str(), &end, 10);
      // CANN stops at the first invalid entry; so do we.
      if (end == item.c_str() || *end != '\0' || id < 0 || id >= c.physical_devices) break;
      c.visible.push_back(static_cast<int>(id));
    }
  } else {
    for (int i = 0; i < c.physical_devices; ++i) c.visible.push_back(i);
  }
  return c;
}

}  // namespace

const Config& config() {
  static const Config c = load();
  return c;
}

double op_cost_seconds() { return config().op_cost_seconds; }

double launch_cost_seconds() { return config().launch_cost_seconds; }

}  // namespace aclsim
