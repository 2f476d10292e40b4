#include "exit_fencer.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "acl_device_guard.h"
#include "acl_table.h"
#include "queue_error.h"
#include "stream_fences.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace torch_npu_ipc {
namespace {

// While this process holds received tensors, it looks this often for their
// producers' exit fence requests.
constexpr auto kFencePoll = std::chrono::milliseconds(20);

std::atomic<bool> g_quiet{false};  // quiet_vanished_producers() was called

class ExitFencer {
 public:
  static ExitFencer& get() {
    static ExitFencer* f = std::make_unique<ExitFencer>().release();  // deleters may run during shutdown
    return *f;
  }

  void hold(Received* r) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = by_table_.empty();
      HeldTable& entry = by_table_[r->ref.table->name()];
      if (entry.table == nullptr) entry.table = r->ref.table;
      entry.held.insert(r);
      // Received after its producer's request was answered (a queue's feeder
      // still sending while the producer exits): answer it again, for all.
      entry.answered = 0;
      if (first && !started_) {
        std::thread([this] { run(); }).detach();
        started_ = true;
      }
    }
    if (first) cv_.notify_one();
  }

  // Under `mu_`, a Received found in the registry is alive.
  void unhold(Received* r) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_table_.find(r->ref.table->name());
    if (it == by_table_.end()) return;
    it->second.held.erase(r);
    if (it->second.held.empty()) by_table_.erase(it);
  }

 private:
  struct HeldTable {
    std::shared_ptr<RefTable> table;
    std::unordered_set<Received*> held;
    uint32_t answered = 0;  // the table's latest fence request answered
    bool warned_gone = false;  // the producer ended without its exit wait: said once
  };
  struct Asked {
    std::shared_ptr<RefTable> table;
    SlotRef slot;
    uint32_t request;
  };

  void run() {
    for (;;) {
      {
        // While this process holds received tensors, look for requests
        // every kFencePoll; otherwise sleep until it holds one.
        std::unique_lock<std::mutex> lock(mu_);
        if (by_table_.empty()) cv_.wait(lock, [this] { return !by_table_.empty(); });
      }
      answer();
      warn_about_vanished_producers();
      std::this_thread::sleep_for(kFencePoll);
    }
  }

  void answer() {
    std::vector<Asked> asked;
    std::map<c10::DeviceIndex, std::vector<c10_npu::NPUStream>> devices;  // device -> streams used there
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [name, entry] : by_table_) {
        const uint32_t request = entry.table->fence_request();
        if (request == 0 || request == entry.answered) continue;
        entry.answered = request;
        for (Received* r : entry.held) {
          asked.push_back(Asked{entry.table, r->ref.slot, request});
          auto& streams = devices[r->import->device()];
          std::lock_guard<std::mutex> used_lock(r->mu);
          for (const auto& stream : r->used_on) add_stream(&streams, stream);
        }
      }
    }
    if (asked.empty()) return;
    for (auto& [device, streams] : devices) {
      // The whole device: a tensor read on a side stream the program never
      // gave to record_stream is covered too (its drop would not be).
      add_stream(&streams, c10_npu::getDefaultNPUStream(device));
      // Else only the streams the tensors were used on and the default one.
      if (!synchronize_device(device)) fences_.fence(streams);
    }
    for (const auto& a : asked) a.table->mark_fenced(a.slot, a.request);
  }

  // A producer that ended without finishing its exit wait (killed, also
  // during that wait, os._exit, a forked child, a multiprocessing.Pool
  // terminated at the end of its `with` block) printed nothing, yet the
  // memory of the tensors this process holds went with it on hardware. Say
  // so once per producer: nothing else would (on aclsim the pages even stay
  // readable).
  void warn_about_vanished_producers() {
    if (g_quiet.load(std::memory_order_relaxed)) return;
    std::vector<std::pair<int32_t, size_t>> gone;  // (pid, tensors held)
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [name, entry] : by_table_) {
        if (entry.warned_gone || entry.table->exit_waited() || entry.table->owner_alive()) continue;
        entry.warned_gone = true;
        gone.emplace_back(entry.table->owner_pid(), entry.held.size());
      }
    }
    for (const auto& [pid, n] : gone) {
      std::fprintf(stderr,
                   "torch_npu_ipc: warning: process %d ended without its exit wait (killed, os._exit, a forked child, "
                   "or a multiprocessing.Pool terminated at the end of its `with` block) while this process holds %zu "
                   "tensor(s) it shared. Their memory belonged to it: on NPU hardware it is gone, so do not use them "
                   "any more. clone() what you keep before the producer ends (see docs/sharing.md, When a peer "
                   "dies).\n",
                   static_cast<int>(pid), n);
    }
  }

  // Waits for the work queued so far on `device`, after torch_npu's task
  // queues handed theirs to the runtime: torch_npu's device synchronize
  // drains the queue of every stream it made, per-stream queues
  // (PER_STREAM_QUEUE) included, so a side stream whose tasks still sit in
  // its own queue is covered too. False when the runtime has no
  // aclrtSynchronizeDevice or the synchronize failed.
  static bool synchronize_device(c10::DeviceIndex device) {
    if (acl().SynchronizeDevice == nullptr) return false;
    try {
      AclDeviceGuard guard(device);
      // check_error: without it torch_npu would take a failed queue's one
      // report silently; with it the report is thrown, and kept.
      return keeping_queue_report(kWhere, [] { return c10_npu::npuSynchronizeDevice(/*check_error=*/true); });
    } catch (...) {
      return false;
    }
  }

  static constexpr const char* kWhere = "in its thread answering an exiting producer's fence";

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, HeldTable> by_table_;  // guarded by mu_
  bool started_ = false;                         // guarded by mu_
  StreamFences fences_{kWhere};                  // fencer thread only
};

}  // namespace

void hold_for_exit_fence(Received* r) { ExitFencer::get().hold(r); }

void unhold_for_exit_fence(Received* r) { ExitFencer::get().unhold(r); }

void quiet_vanished_producers() { g_quiet.store(true, std::memory_order_relaxed); }

}  // namespace torch_npu_ipc
