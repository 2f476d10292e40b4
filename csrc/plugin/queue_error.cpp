#include "queue_error.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include <c10/util/Exception.h>

namespace torch_npu_ipc {
namespace {

struct Kept {
  std::atomic<bool> any{false};
  std::mutex mu;
  std::string message;  // guarded by mu
};

Kept& kept() {
  static Kept* k = std::make_unique<Kept>().release();  // read from threads that outlive static destruction
  return *k;
}

std::string first_line(const char* text) {
  const char* end = std::strchr(text, '\n');
  return end == nullptr ? std::string(text) : std::string(text, end);
}

}  // namespace

bool is_queue_report(const std::exception& e) {
  // torch_npu's wording (NPUQueue.cpp), the same in its 2.1, 2.6, 2.7.1,
  // 2.12 and master sources.
  return std::strstr(e.what(), "Inner error") != nullptr;
}

void keep_queue_report(const char* where, const std::exception& e) {
  Kept& k = kept();
  {
    std::lock_guard<std::mutex> lock(k.mu);
    if (k.any.load()) return;
    k.message = std::string("torch_npu's task queue failed, and torch_npu's report of it, which it gives only "
                            "once, went to torch_npu_ipc ") +
                where +
                ". torch_npu drops all later work on that queue without an error, so results computed since are "
                "not valid. The report: " +
                first_line(e.what()) +
                " The process cannot go on using the NPU: restart it (ASCEND_LAUNCH_BLOCKING=1 names the failing "
                "operator). See docs/troubleshooting.md.";
    k.any.store(true);
  }
  std::fprintf(stderr, "torch_npu_ipc: error: %s\n", k.message.c_str());
  std::fflush(stderr);
}

void raise_kept_queue_report() {
  Kept& k = kept();
  if (!k.any.load(std::memory_order_acquire)) return;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(k.mu);
    message = k.message;
  }
  TORCH_CHECK(false, message);
}

}  // namespace torch_npu_ipc
