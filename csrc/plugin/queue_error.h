// torch_npu reports a failure of its task queue once, to the first call that
// drains or enqueues on the failed queue, and then drops later work on it
// without a word. When that first call comes from the plugin on a thread
// the user does not watch (its releaser, its exit fencer, a multiprocessing
// queue's feeder thread sharing a tensor), the user would never see the
// report: the plugin keeps it, prints it, and raises it from the next reads
// of NPU data (copies, Tensor.item(): copy_hook.cpp).
#pragma once

#include <exception>

namespace torch_npu_ipc {

// Whether `e` is torch_npu's one-time report of a failed task queue.
bool is_queue_report(const std::exception& e);

// Keeps `e` (the first one kept wins), which reached the plugin `where`
// ("in its thread releasing received tensors"), and prints it to stderr once.
void keep_queue_report(const char* where, const std::exception& e);

// Raises the kept report, if any, at every call: the queue stays failed.
void raise_kept_queue_report();

// Runs `f`; a report it throws is kept, then propagates. For calls that a
// thread the user does not watch may make (a multiprocessing queue's feeder
// thread pickles the tensors given to put()).
template <typename F>
auto keeping_queue_report(const char* where, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    if (is_queue_report(e)) keep_queue_report(where, e);
    throw;
  }
}

}  // namespace torch_npu_ipc
