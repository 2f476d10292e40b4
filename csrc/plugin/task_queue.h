// ACL work queued behind torch_npu's own tasks, and the signals that order it
// across two devices' queues.
//
// With TASK_QUEUE_ENABLE=1 or 2, torch_npu does not call the runtime from the
// caller's thread: it queues each task, and a thread per device (or per
// stream, with PER_STREAM_QUEUE) hands the tasks to the runtime in order. A
// raw ACL call made from the caller's thread is ordered after earlier
// torch_npu work only once that queue has been drained, which makes the
// caller wait for the queue thread. `enqueue` instead puts the call in the
// queue, through torch_npu's public OpCommand::RunOpApiV2 (the entry point
// op-plugin kernels use): the caller does not wait, and the call reaches the
// runtime after every task queued before it on that stream, and before every
// task queued after it.
//
// Two queues run independently. An aclrtStreamWaitEvent binds to the record
// that is current when the wait reaches the runtime, so a call queued for
// device S that must see a record queued for device D waits, on S's queue
// thread, until D's queue thread issued the record: a QueueSignal. The
// caller's thread never waits on one.
//
// Deadlock freedom. Calls that wait on one another form a group, enqueued as
// a whole while an EnqueueGroup is held; a call waits only for calls of its
// own group. Groups are then queued in the same order in every queue, so the
// earliest unfinished group never waits behind a later one: each of its
// calls is reached (everything before it in its queue is torch_npu work,
// which does not wait on other queues, or an earlier group, done by
// induction), and the group completes. A group must never contain a call
// that runs inline (see runs_queued): it would wait in the caller's thread
// for a call not yet enqueued.
#pragma once

#include "acl_abi.h"
#include <c10/core/Device.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace torch_npu_ipc {

// Whether torch_npu queues work for `stream` (task queue on, not a
// synchronously launched stream). When false, `enqueue` runs the call at
// once in the caller's thread, and a failure raises there.
bool runs_queued(const c10_npu::NPUStream& stream);

// Runs `call` after every task queued so far on the current stream of
// `device` (made current in torch_npu for the call). `call` returns an
// aclError; a non-zero result puts torch_npu's queue in its error state, so
// the next torch_npu call on that device raises, naming `name`.
void enqueue(c10::DeviceIndex device, const std::string& name, std::function<aclError()> call);

// torch_npu drains a queue right after the first task ever put in it (its
// switch from INIT to RUN): a group whose first call waits for a later one
// would wait there forever in the caller's thread. Puts a no-op in the queue
// of `stream` (the current stream of its device) once, so that groups only
// meet running queues.
void ensure_queue_running(const c10_npu::NPUStream& stream);

// Held while the calls of one group are enqueued (see above).
class EnqueueGroup {
 public:
  EnqueueGroup();

 private:
  std::lock_guard<std::mutex> lock_;
};

// A one-shot "this queued call has run" flag, fired by one queue thread and
// awaited by another.
class QueueSignal {
 public:
  void fire(aclError result);
  // The firing call's result, once fired; an error if the firing call was
  // dropped without running (torch_npu discards the rest of a queue after a
  // failure) or `timeout` passed.
  aclError wait(std::chrono::milliseconds timeout);

 private:
  friend class QueueSignalSender;
  void abandon();

  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool abandoned_ = false;
  aclError result_ = ACL_SUCCESS;
};

// The firing end, owned by the queued call that fires: if that call is
// destroyed without having run, the signal fires with an error.
class QueueSignalSender {
 public:
  explicit QueueSignalSender(std::shared_ptr<QueueSignal> signal) : signal_(std::move(signal)) {}
  QueueSignalSender(const QueueSignalSender&) = delete;
  QueueSignalSender& operator=(const QueueSignalSender&) = delete;
  ~QueueSignalSender();
  void fire(aclError result);

 private:
  std::shared_ptr<QueueSignal> signal_;
  bool fired_ = false;
};

// Holds the task queue of the current stream of `device`: a queued call that
// waits until release() (or `timeout`), then returns `result`. Diagnostics
// and tests: it shows that a caller does not wait for the queue, and a
// non-zero `result` makes the queue fail as a failed kernel would. Raises
// when torch_npu does not queue work for that stream.
class QueueHold {
 public:
  QueueHold(c10::DeviceIndex device, std::chrono::milliseconds timeout, aclError result);
  QueueHold(const QueueHold&) = delete;
  QueueHold& operator=(const QueueHold&) = delete;
  ~QueueHold();
  void release();

 private:
  std::shared_ptr<QueueSignal> release_;
};

// How long a queued call waits for a signal before it fails. Long, because
// the firing queue may itself wait for the device (a full runtime stream);
// reaching it means the firing call was lost.
constexpr std::chrono::milliseconds kQueueSignalTimeout{std::chrono::minutes(5)};

}  // namespace torch_npu_ipc
