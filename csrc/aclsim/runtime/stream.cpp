#include "stream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "config.h"
#include "device.h"
#include "no_destructor.h"

namespace aclsim {

namespace {

using Clock = std::chrono::steady_clock;

// A task quicker than this is treated as taking its run time from the device
// clock; a slower one (a wait that blocked, heavy CPU work) resets the clock
// to the real time it finished.
constexpr auto kQuickTask = std::chrono::microseconds(50);

// The device-time bookkeeping of the task running on this worker thread.
struct TaskClock {
  Clock::time_point start;          // when it could start on the device
  Clock::time_point spent_until{};  // end of the device time it spent, if any
  Clock::time_point spent_at{};     // real time when that spending returned
};
thread_local TaskClock* running_task = nullptr;

// ACLSIM_JITTER_US: each stream draws its own sequence, from the process's
// seed (ACLSIM_JITTER_SEED, else a random one) and its creation rank.
std::mt19937_64 jitter_rng() {
  if (config().jitter_us == 0) return std::mt19937_64{};
  static const uint64_t base = config().jitter_seed != 0 ? config().jitter_seed : std::random_device{}();
  static std::atomic<uint64_t> streams{0};
  return std::mt19937_64(base * 0x9E3779B97F4A7C15ULL + streams.fetch_add(1, std::memory_order_relaxed));
}

}  // namespace

void spend_device_time(std::chrono::nanoseconds duration) {
  TaskClock* task = running_task;
  if (task == nullptr) {
    std::this_thread::sleep_for(duration);
    return;
  }
  const Clock::time_point from = task->spent_until == Clock::time_point{} ? task->start : task->spent_until;
  task->spent_until = from + std::chrono::duration_cast<Clock::duration>(duration);
  std::this_thread::sleep_until(task->spent_until);
  task->spent_at = Clock::now();
}

std::chrono::steady_clock::time_point device_now() {
  const TaskClock* task = running_task;
  if (task == nullptr) return Clock::now();
  return task->spent_until == Clock::time_point{} ? task->start : task->spent_until;
}

Stream::Stream(int device, bool is_default)
    : device_(device), is_default_(is_default), jitter_rng_(jitter_rng()), worker_([this] { run(); }) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

aclError Stream::enqueue(const char* what, Task task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return fail(ACL_ERROR_RT_STREAM_CONTEXT, std::string(what) + ": stream is being destroyed");
  if (error_ != ACL_SUCCESS && stop_on_failure_) {
    return fail(error_, std::string(what) + ": stream stopped after an earlier failure: " + error_message_);
  }
  queue_.push_back(Queued{std::move(task), Clock::now()});
  ++enqueued_;
  work_cv_.notify_one();
  return ACL_SUCCESS;
}

void Stream::run() {
  set_current_device(device_);
  const long jitter_us = config().jitter_us;
  std::uniform_int_distribution<long> jitter(0, jitter_us);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    Queued item = std::move(queue_.front());
    queue_.pop_front();
    bool skip = error_ != ACL_SUCCESS && stop_on_failure_;
    lock.unlock();
    aclError rc = ACL_SUCCESS;
    std::string message;
    if (!skip) {
      TaskClock clock{std::max(item.launched, device_clock_)};
      running_task = &clock;
      const Clock::time_point t0 = Clock::now();
      if (jitter_us > 0) spend_device_time(std::chrono::microseconds(jitter(jitter_rng_)));
      rc = item.task();
      const Clock::time_point t1 = Clock::now();
      running_task = nullptr;
      if (clock.spent_until != Clock::time_point{}) {
        device_clock_ = clock.spent_until + (t1 - clock.spent_at);  // plus the CPU work after the device time
      } else if (t1 - t0 < kQuickTask) {
        device_clock_ = clock.start + (t1 - t0);
      } else {
        device_clock_ = t1;
      }
      if (rc != ACL_SUCCESS) {
        const char* m = aclGetRecentErrMsg();
        message = m != nullptr ? m : "device task failed";
      }
    }
    item.task = nullptr;  // release captured resources before reporting done
    lock.lock();
    if (rc != ACL_SUCCESS && error_ == ACL_SUCCESS) {
      error_ = rc;
      error_message_ = message;
    }
    ++finished_;
    done_cv_.notify_all();
  }
}

aclError Stream::synchronize(int32_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  auto reached = [this, target] { return finished_ >= target; };
  if (timeout_ms < 0) {
    done_cv_.wait(lock, reached);
  } else if (!done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), reached)) {
    return fail(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "stream synchronize timed out");
  }
  if (error_ != ACL_SUCCESS) {
    aclError rc = fail(error_, error_message_);
    if (!stop_on_failure_) {
      error_ = ACL_SUCCESS;
      error_message_.clear();
    }
    return rc;
  }
  return ACL_SUCCESS;
}

bool Stream::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ >= enqueued_;
}

void Stream::discard_pending() {
  std::lock_guard<std::mutex> lock(mu_);
  finished_ += queue_.size();
  queue_.clear();
  done_cv_.notify_all();
}

HandleTable<Stream>& stream_table() {
  static NoDestructor<HandleTable<Stream>> table(uintptr_t{0x5A0000000000});
  return *table;
}

std::shared_ptr<Stream> resolve_stream(aclrtStream stream, aclError* err) {
  if (stream == nullptr) {
    int dev = -1;
    if ((*err = require_current_device(&dev)) != ACL_SUCCESS) return nullptr;
    stream = default_stream(dev);
  }
  std::shared_ptr<Stream> s = stream_table().get(stream);
  if (s == nullptr) {
    *err = fail(ACL_ERROR_RT_STREAM_CONTEXT, "invalid stream handle (never created, or already destroyed)");
    return nullptr;
  }
  *err = ACL_SUCCESS;
  return s;
}

std::shared_ptr<Stream> resolve_work_stream(aclrtStream stream, const char* call, aclError* err) {
  std::shared_ptr<Stream> s = resolve_stream(stream, err);
  if (s == nullptr) return nullptr;
  const int current = current_device();
  if (current >= 0 && current != s->device()) {
    *err = fail(ACL_ERROR_RT_STREAM_CONTEXT, std::string(call) + ": stream is not in current ctx (a stream of device " +
                                                 std::to_string(s->device()) + ", device " + std::to_string(current) +
                                                 " is current)");
    return nullptr;
  }
  return s;
}

aclError enqueue(aclrtStream stream, const char* what, Task task) {
  aclError err = ACL_SUCCESS;
  std::shared_ptr<Stream> s = resolve_work_stream(stream, what, &err);
  if (s == nullptr) return err;
  return s->enqueue(what, std::move(task));
}

aclError check_sync_timeout(int32_t timeout_ms, const char* call) {
  if (timeout_ms == -1 || timeout_ms > 0) return ACL_SUCCESS;
  return fail(ACL_ERROR_RT_PARAM_INVALID, std::string(call) + ": timeout " + std::to_string(timeout_ms) +
                                              " ms is neither -1 (no limit) nor positive");
}

}  // namespace aclsim
