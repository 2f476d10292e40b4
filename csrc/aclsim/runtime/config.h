// Simulator settings, read once from the environment.
//
//   ACLSIM_DEVICES        number of simulated devices (1..8, default 2)
//   ACLSIM_SOC            SoC name reported by aclrtGetSocName (default Ascend910B1)
//   ACLSIM_DEVICE_MEMORY_MB  simulated HBM per device (default 16384)
//   ACLSIM_OP_COST_US     simulated device time of every operator (default 0)
//   ACLSIM_JITTER_US      up to this much simulated device time, drawn at
//                         random, before every stream task (default 0): a
//                         race finder, streams' relative speed keeps changing
//   ACLSIM_JITTER_SEED    seed of those draws (default: a new one per process)
//   ACLSIM_MAX_IPC_EVENTS IPC events alive per device (1..65536, default
//                         65536, CANN's limit); creating one more fails with
//                         ACL_ERROR_RT_NO_EVENT_RESOURCE
//   ACLSIM_MAX_EVENTS     other (local) events alive per device (1..2^30,
//                         default 2^30: no limit in practice); a fault
//                         injection knob, failing creation the same way
//                         (not CANN-like: CANN takes a local event's id at
//                         record time, and a record then waits for one)
//   ACLSIM_EVENT_LIMIT_ERROR  the error code of a creation past either limit
//                         (default 207007, ACL_ERROR_RT_NO_EVENT_RESOURCE):
//                         CANN documents the IPC limit but not its code
//   ACLSIM_TRACE_EVENTS   1: log every event call (thread, handle, stream, result) to stderr
//   ASCEND_RT_VISIBLE_DEVICES  as on CANN: remaps and trims the visible devices
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace aclsim {

constexpr int kMaxIpcEvents = 65536;  // per device, as documented for CANN
constexpr int kMaxEvents = 1 << 30;   // local events: the knob's ceiling and default

struct Config {
  int physical_devices = 2;
  std::vector<int> visible;  // logical id -> physical id
  std::string soc = "Ascend910B1";
  size_t device_memory = size_t{16} << 30;
  double op_cost_seconds = 0.0;
  double launch_cost_seconds = 0.0;
  long jitter_us = 0;
  unsigned long jitter_seed = 0;  // 0: drawn per process
  bool trace_events = false;
  int max_ipc_events = kMaxIpcEvents;
  int max_events = kMaxEvents;
  int event_limit_error = 207007;  // ACL_ERROR_RT_NO_EVENT_RESOURCE
  bool ipc_events = true;          // false: a chip without IPC events (CANN's RT_FEATURE_IPC_EVENT)
  int device_count() const { return static_cast<int>(visible.size()); }
};

const Config& config();

constexpr int kMaxDevices = 8;

}  // namespace aclsim
