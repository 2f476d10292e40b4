#include "own_pid.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace torch_npu_ipc {
namespace {

std::atomic<int32_t> cached{0};  // 0: not read yet, or cleared in a forked child

}  // namespace

int32_t own_pid() {
  static std::once_flag registered;
  std::call_once(registered, [] { pthread_atfork(nullptr, nullptr, [] { cached.store(0); }); });
  int32_t pid = cached.load(std::memory_order_relaxed);
  if (pid == 0) {
    pid = static_cast<int32_t>(getpid());
    cached.store(pid, std::memory_order_relaxed);
  }
  return pid;
}

}  // namespace torch_npu_ipc
