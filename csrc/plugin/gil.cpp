#include "gil.h"

#include <atomic>
#include <chrono>
#include <thread>

namespace torch_npu_ipc {
namespace {

std::atomic<PyThreadState*> exiting_thread{nullptr};

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

}  // namespace

void mark_interpreter_exiting() { exiting_thread.store(PyThreadState_Get(), std::memory_order_release); }

void park_if_exiting(PyThreadState* self) {
  // Only once the interpreter finalizes: before that (atexit handlers)
  // threads must come back, multiprocessing's handler joins the queue feeder
  // threads that pickle tensors through this module. After it nothing joins
  // them, and CPython would end a thread that takes the GIL back.
  PyThreadState* exiting = exiting_thread.load(std::memory_order_acquire);
  if (exiting == nullptr || exiting == self || !interpreter_finalizing()) return;
  // The process is about to end; this thread holds no lock of ours here.
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace torch_npu_ipc
