#include "task_queue.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <atomic>
#include <set>
#include <thread>
#include <utility>

#include "torch_npu/csrc/core/npu/NPUGuard.h"
#include "torch_npu/csrc/framework/OpCommand.h"

namespace torch_npu_ipc {
namespace {

// torch_npu reads TASK_QUEUE_ENABLE (and ASCEND_LAUNCH_BLOCKING) once per
// process and exports no getter: ask RunOpApiV2 itself, once, whether it
// runs a call at once in the caller's thread. Asked on the device's default
// stream: the caller's current stream may be a synchronously launched one,
// which never queues, and its answer would stick for the whole process.
bool task_queue_on() {
  static const bool on = [] {
    const c10::DeviceIndex device = c10_npu::current_device();
    c10_npu::NPUStreamGuard guard(c10_npu::getDefaultNPUStream(device));
    auto ran_on = std::make_shared<std::atomic<std::thread::id>>();
    enqueue(device, "torch_npu_ipc::probe_task_queue", [ran_on] {
      ran_on->store(std::this_thread::get_id());
      return ACL_SUCCESS;
    });
    return ran_on->load() != std::this_thread::get_id();
  }();
  return on;
}

std::mutex& group_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

bool runs_queued(const c10_npu::NPUStream& stream) { return task_queue_on() && !stream.isSyncLaunchStream(); }

void enqueue(c10::DeviceIndex device, const std::string& name, std::function<aclError()> call) {
  // RunOpApiV2 queues on torch_npu's current device and stream, and moves
  // the function out of `handler`.
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  std::function<int()> handler = std::move(call);
  at_npu::native::OpCommand::RunOpApiV2(name, handler);
}

void ensure_queue_running(const c10_npu::NPUStream& stream) {
  // Leaked: a daemon thread may still copy while the process exits.
  static auto* mu = std::make_unique<std::mutex>().release();
  static auto* running = std::make_unique<std::set<std::pair<c10::DeviceIndex, c10::StreamId>>>().release();
  const std::pair<c10::DeviceIndex, c10::StreamId> key{stream.device_index(), stream.id()};
  {
    std::lock_guard<std::mutex> lock(*mu);
    if (running->count(key) != 0) return;
  }
  TORCH_INTERNAL_ASSERT(c10_npu::getCurrentNPUStream(stream.device_index()) == stream,
                        "ensure_queue_running: not the current stream of its device");
  enqueue(stream.device_index(), "torch_npu_ipc::start_queue", [] { return ACL_SUCCESS; });
  std::lock_guard<std::mutex> lock(*mu);
  running->insert(key);
}

EnqueueGroup::EnqueueGroup() : lock_(group_mutex()) {}

void QueueSignal::fire(aclError result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    result_ = result;
  }
  cv_.notify_all();
}

void QueueSignal::abandon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandoned_ = !done_;
  }
  fire(ACL_ERROR_INTERNAL_ERROR);
}

aclError QueueSignal::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
    LOG(ERROR) << "torch_npu_ipc: a queued cross-device call waited " << timeout.count()
               << " ms for the other device's task queue and gave up";
    return ACL_ERROR_INTERNAL_ERROR;
  }
  if (abandoned_) {
    LOG(ERROR) << "torch_npu_ipc: the other device's task queue dropped its half of a cross-device "
                  "call (an earlier task on it failed)";
  }
  return result_;
}

QueueHold::QueueHold(c10::DeviceIndex device, std::chrono::milliseconds timeout, aclError result)
    : release_(std::make_shared<QueueSignal>()) {
  const c10_npu::NPUStream stream = c10_npu::getCurrentNPUStream(device);
  TORCH_CHECK(runs_queued(stream), "torch_npu launches work at once on the current stream of npu:", int(device),
              " (TASK_QUEUE_ENABLE=0, ASCEND_LAUNCH_BLOCKING=1 or a synchronously launched stream): "
              "there is no task queue to hold");
  ensure_queue_running(stream);
  enqueue(device, "torch_npu_ipc::queue_hold", [release = release_, timeout, result] {
    release->wait(timeout);
    return result;
  });
}

QueueHold::~QueueHold() { release(); }

void QueueHold::release() { release_->fire(ACL_SUCCESS); }

QueueSignalSender::~QueueSignalSender() {
  if (!fired_) signal_->abandon();
}

void QueueSignalSender::fire(aclError result) {
  fired_ = true;
  signal_->fire(result);
}

}  // namespace torch_npu_ipc
