// aclsim internal interface shared by the simulator's libraries.
//
// libascendcl.so implements the runtime (devices, memory, streams, events,
// IPC). The other simulated libraries (libopapi.so for aclnn operators, ...)
// link against it and use only what this header declares. Nothing here is
// part of CANN's ABI; the ABI itself comes from CANN's own headers
// (<acl/acl.h>, the copy shipped inside the torch_npu wheel).
#pragma once

#include "acl_abi.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#define ACLSIM_API __attribute__((visibility("default")))

namespace aclsim {

// ---------------------------------------------------------------- errors
// Records `message` as the calling thread's most recent error (returned by
// aclGetRecentErrMsg) and returns `code`, so call sites read
// `return fail(ACL_ERROR_INVALID_PARAM, "...");`.
ACLSIM_API aclError fail(aclError code, std::string message);

// Records `code` as the thread's last error (aclrtGetLastError) but no message:
// for the failures CANN only logs at info level, such as aclrtGetDevice with no
// current device, which callers use as a question ("is a device set?").
ACLSIM_API aclError fail_quietly(aclError code);

// --------------------------------------------------------------- counters
// Per-process call counters, readable from Python (aclsim.counters()).
enum class Counter : int {
  SynchronizeStream,
  SynchronizeEvent,
  SynchronizeDevice,
  StreamWaitEvent,
  RecordEvent,
  QueryEvent,
  CreateEvent,
  DestroyEvent,
  MemcpyHostToHost,
  MemcpyHostToDevice,
  MemcpyDeviceToHost,
  MemcpyDeviceToDevice,
  MemcpyInterDevice,
  IpcEventCreate,
  IpcEventOpen,
  IpcEventDestroy,
  IpcEventHandleExport,
  IpcMemExport,
  IpcMemImport,
  IpcMemClose,
  DeviceMalloc,
  DeviceFree,
  StreamCreate,
  StreamDestroy,
  OpLaunch,
  kCount
};
ACLSIM_API void count(Counter c, uint64_t n = 1);
ACLSIM_API const char* counter_name(Counter c);
ACLSIM_API uint64_t counter_value(Counter c);

// ----------------------------------------------------------------- streams
// A unit of device work. It runs on the stream's worker thread, in order
// with everything else enqueued on that stream. A non-zero return puts the
// stream into the failed state: later synchronizations report the error.
using Task = std::function<aclError()>;

// Enqueues `task` on `stream` (nullptr = the current device's default
// stream). `what` names the work in error messages. Returns an error, and
// does not run the task, when the stream is invalid or already failed.
ACLSIM_API aclError enqueue(aclrtStream stream, const char* what, Task task);

// Spends `duration` of simulated device time in the task running on this
// thread (aclsim.sleep, ACLSIM_OP_COST_US). The task ends `duration` after
// it could start on the device (the later of its launch and the end of the
// stream's previous task), not `duration` after the worker thread happened
// to wake: the OS's wake-up latency does not add up over back-to-back work,
// as it does not on hardware. Never ends before launch + duration. Outside a
// stream worker it just sleeps.
ACLSIM_API void spend_device_time(std::chrono::nanoseconds duration);

// The device's clock as seen by the task running on this stream worker
// thread: when the task could start on the device, plus the device time it
// spent so far. An event record stamps this, as the device stamps a record
// when it reaches it: a worker thread the OS woke late does not shorten the
// interval between two records. Outside a stream worker: the host's clock.
ACLSIM_API std::chrono::steady_clock::time_point device_now();

// Simulated device time charged to every operator launch (seconds, from
// ACLSIM_OP_COST_US; 0 by default).
ACLSIM_API double op_cost_seconds();

// Host time the caller of every operator launch spends in it (seconds, from
// ACLSIM_LAUNCH_COST_US; 0 by default), as a launch costs the host on CANN.
ACLSIM_API double launch_cost_seconds();

// ------------------------------------------------------------------ memory
// True when [ptr, ptr + bytes) lies inside one live device allocation of
// this process (own or imported). Operators use it to refuse bad pointers
// with an error instead of crashing.
ACLSIM_API bool is_device_range(const void* ptr, size_t bytes);

}  // namespace aclsim
