#include "gil.h"

#include <atomic>
#include <chrono>
#include <thread>

namespace torch_npu_ipc {
namespace {

std::atomic<PyThreadState*> exiting_thread{nullptr};

}  // namespace

void mark_interpreter_exiting() { exiting_thread.store(PyThreadState_Get(), std::memory_order_release); }

void park_if_exiting(PyThreadState* self) {
  PyThreadState* exiting = exiting_thread.load(std::memory_order_acquire);
  if (exiting == nullptr || exiting == self) return;
  // The process is about to end; this thread holds no lock of ours here.
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace torch_npu_ipc
