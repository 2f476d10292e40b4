// torch_npu reports a failure of its task queue once, to the first call that
// drains or enqueues on the failed queue, and then drops later work on it
// without a word. When that first call comes from one of the plugin's own
// threads (the releaser, the exit fencer), the user would never see the
// report: the plugin keeps it, prints it, and raises it from its next calls.
#pragma once

#include <exception>

namespace torch_npu_ipc {

// Whether `e` is torch_npu's one-time report of a failed task queue.
bool is_queue_report(const std::exception& e);

// Keeps `e` (the first one kept wins), caught by the plugin's thread doing
// `what`, and prints it to stderr once.
void keep_queue_report(const char* what, const std::exception& e);

// Raises the kept report, if any, at every call: the queue stays failed.
void raise_kept_queue_report();

}  // namespace torch_npu_ipc
