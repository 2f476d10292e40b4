#include "releaser.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "stream_fences.h"

namespace torch_npu_ipc {
namespace {

class Releaser {
 public:
  static Releaser& get() {
    static Releaser* r = std::make_unique<Releaser>().release();  // deleters may run during shutdown
    return *r;
  }

  void push(std::unique_ptr<Received>&& item, const c10_npu::NPUStream& stream) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) {
      std::thread([this] { run(); }).detach();
      started_ = true;
    }
    queue_.emplace_back(std::move(item), stream);
    cv_.notify_one();
  }

  int64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }

 private:
  using Batch = std::deque<std::pair<std::unique_ptr<Received>, c10_npu::NPUStream>>;

  void run() {
    for (;;) {
      Batch batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        // Take everything queued: one fence per stream covers every drop made
        // before it on that stream (a fence per item would fall behind a busy
        // receiver, keeping producers' blocks in limbo).
        batch.swap(queue_);
      }
      std::vector<c10_npu::NPUStream> streams;
      for (const auto& item : batch) {
        add_stream(&streams, item.second);
        std::lock_guard<std::mutex> used_lock(item.first->mu);
        for (const auto& stream : item.first->used_on) add_stream(&streams, stream);
      }
      syncs_.fetch_add(fences_.fence(streams), std::memory_order_relaxed);
      for (auto& item : batch) {
        // The mapping first (it closes here when no other tensor or kept
        // import holds it): CANN wants importers closed before the producer
        // may free, and so unexport, the memory.
        item.first->import.reset();
        item.first->ref.table->release(item.first->ref.slot);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  Batch queue_;  // guarded by mu_
  bool started_ = false;
  StreamFences fences_{"in its thread releasing received tensors"};  // releaser thread only
  std::atomic<int64_t> syncs_{0};
};

}  // namespace

void release_after_use(std::unique_ptr<Received>&& item, const c10_npu::NPUStream& stream) {
  Releaser::get().push(std::move(item), stream);
}

int64_t release_syncs() { return Releaser::get().syncs(); }

}  // namespace torch_npu_ipc
