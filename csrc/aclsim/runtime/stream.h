// A simulated device stream: an in-order queue of tasks run by a worker
// thread of its own. Host calls that enqueue return at once; the work runs
// later, in order, as it would on the device.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "aclsim/runtime.h"
#include "handles.h"

namespace aclsim {

class Stream {
 public:
  Stream(int device, bool is_default);
  ~Stream();  // runs what is queued, then stops the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }
  bool is_default() const { return is_default_; }

  aclError enqueue(const char* what, Task task);

  // Blocks until every task enqueued before the call ran. timeout_ms < 0
  // waits forever. Reports (and, in continue-on-failure mode, clears) the
  // first task failure.
  aclError synchronize(int32_t timeout_ms);

  // True when nothing enqueued is still pending.
  bool idle();

  // Drops tasks that have not started (aclrtDestroyStreamForce).
  void discard_pending();

  void set_stop_on_failure(bool stop) { stop_on_failure_ = stop; }

 private:
  void run();

  const int device_;
  const bool is_default_;
  bool stop_on_failure_ = false;

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  struct Queued {
    Task task;
    std::chrono::steady_clock::time_point launched;  // when the host enqueued it
  };
  std::deque<Queued> queue_;
  // The device clock: when the previous task would have finished on the
  // device (see spend_device_time). Only the worker touches it.
  std::chrono::steady_clock::time_point device_clock_{};
  uint64_t enqueued_ = 0;
  uint64_t finished_ = 0;
  bool stopping_ = false;
  aclError error_ = ACL_SUCCESS;
  std::string error_message_;
  std::mt19937_64 jitter_rng_;  // ACLSIM_JITTER_US's draws; only the worker uses it

  std::thread worker_;  // last: it starts running with every other member made
};

HandleTable<Stream>& stream_table();

// CANN's rule for the timeout of aclrtSynchronizeStreamWithTimeout and
// aclrtSynchronizeEventWithTimeout (ApiErrorDecorator::StreamSynchronize,
// ::EventSynchronize): -1 (no limit) or positive ms. Otherwise fails `call`
// with ACL_ERROR_RT_PARAM_INVALID.
aclError check_sync_timeout(int32_t timeout_ms, const char* call);


// Resolves an aclrtStream argument: nullptr means the default stream of the
// calling thread's current device. On failure returns nullptr and sets the
// error message; *err receives the ACL error code.
std::shared_ptr<Stream> resolve_stream(aclrtStream stream, aclError* err);

// resolve_stream() for a call that gives the stream new work (launches,
// async copies, event record/wait/reset, destroy). As on CANN, the stream must
// belong to the calling thread's current context: a stream of another device
// is refused with ACL_ERROR_RT_STREAM_CONTEXT (107003). A thread with no
// current device is not checked (aclsim is lenient there).
std::shared_ptr<Stream> resolve_work_stream(aclrtStream stream, const char* call, aclError* err);

}  // namespace aclsim
