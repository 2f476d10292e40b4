// The two-phase executor of the aclnn ABI.
//
// Phase 1, aclnnXxxGetWorkspaceSize(args..., &wsSize, &executor), validates
// the arguments and packages the work, with copies of every descriptor and
// scalar it needs, into an aclOpExecutor; it asks for no workspace. Phase 2,
// aclnnXxx(ws, wsSize, executor, stream), hands the executor to the stream's
// worker thread and returns; the executor is freed once the work has run
// (or at once if it cannot be queued). Executors are single-use.
#pragma once

#include <acl/acl.h>

#include <cstdint>
#include <functional>

#include "status.h"

// The work one operator call performs on the stream worker. It reports a
// failure by throwing OpError, which fails the stream.
struct aclOpExecutor {
  const char* op = "";  // static string: the aclnn name, for messages
  std::function<void()> work;
};

namespace aclsim::opapi {

using Build = std::function<std::function<void()>()>;

// Phase 1 driver: runs `build` (which validates and returns the work, or
// throws OpError), then publishes a new executor through `executor` and sets
// *workspace_size to 0. Errors are recorded with aclsim::fail and returned.
aclnnStatus prepare(const char* op, uint64_t* workspace_size, aclOpExecutor** executor,
                    const Build& build);

// Phase 2 driver: queues the executor's work on `stream` and releases it.
aclnnStatus launch(const char* op, aclOpExecutor* executor, aclrtStream stream);

}  // namespace aclsim::opapi

// Defines the exported phase-2 entry point of operator `name`.
#define OPAPI_DEFINE_LAUNCH(name)                                                      \
  OPAPI_EXPORT aclsim::opapi::aclnnStatus name(void* workspace, uint64_t workspaceSize, \
                                               aclOpExecutor* executor, aclrtStream stream) { \
    (void)workspace;                                                                   \
    (void)workspaceSize;                                                               \
    return aclsim::opapi::launch(#name, executor, stream);                             \
  }
