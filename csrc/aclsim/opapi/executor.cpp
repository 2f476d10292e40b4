// Two-phase plumbing shared by every aclnn operator (see executor.h).
#include "executor.h"

#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "aclsim/runtime.h"

namespace aclsim::opapi {

aclnnStatus prepare(const char* op, uint64_t* workspace_size, aclOpExecutor** executor,
                    const Build& build) {
  try {
    if (workspace_size == nullptr) throw_nullptr("workspaceSize");
    if (executor == nullptr) throw_nullptr("executor");
    auto made = std::make_unique<aclOpExecutor>();
    made->op = op;
    made->work = build();
    *workspace_size = 0;
    *executor = made.release();  // ownership passes to the phase-2 call
    return kSuccess;
  } catch (const OpError& e) {
    return aclsim::fail(e.code(), std::string(op) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return aclsim::fail(kErrInner, std::string(op) + ": out of host memory");
  } catch (const std::exception& e) {
    return aclsim::fail(kErrInner, std::string(op) + ": " + e.what());
  }
}

aclnnStatus launch(const char* op, aclOpExecutor* executor, aclrtStream stream) {
  std::unique_ptr<aclOpExecutor> owned(executor);
  if (!owned) {
    return aclsim::fail(kErrParamNullptr, std::string(op) + ": executor must not be null");
  }
  try {
    aclsim::count(Counter::OpLaunch);
    if (const double host = aclsim::launch_cost_seconds(); host > 0) {
      // The launching thread (torch_npu's queue thread with its task queue on) is held, so
      // torch_npu's queue fills when the caller launches faster than that.
      std::this_thread::sleep_for(std::chrono::duration<double>(host));
    }
    // std::function needs a copyable callable, so the task shares ownership.
    std::shared_ptr<aclOpExecutor> shared(std::move(owned));
    const auto cost = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(aclsim::op_cost_seconds()));
    const aclError queued = aclsim::enqueue(stream, shared->op, [shared, cost]() -> aclError {
      if (cost.count() > 0) aclsim::spend_device_time(cost);
      try {
        shared->work();
        return ACL_SUCCESS;
      } catch (const OpError& e) {
        return aclsim::fail(e.code(), std::string(shared->op) + ": " + e.what());
      } catch (const std::exception& e) {
        return aclsim::fail(kErrInner, std::string(shared->op) + ": " + e.what());
      }
    });
    return queued;
  } catch (const std::exception& e) {
    return aclsim::fail(kErrInner, std::string(op) + ": " + e.what());
  }
}

}  // namespace aclsim::opapi
