// torch_npu streams as the plugin sees them: identified from Python by the
// (stream_id, device_index, device_type) triple every torch.npu.Stream
// carries, and turned into the raw aclrtStream only after torch_npu's task
// queue handed every earlier task of that stream to the runtime.
#pragma once

#include "acl_abi.h"
#include <c10/core/Stream.h>

#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace torch_npu_ipc {

struct StreamRef {
  int64_t stream_id = 0;
  int64_t device_index = 0;
  int64_t device_type = 0;
};

// The torch_npu stream named by `ref`.
c10_npu::NPUStream to_npu_stream(const StreamRef& ref);

// The raw stream, after draining torch_npu's task queue for it, so that an
// ACL call made now is ordered after everything launched on it before.
aclrtStream drained(const c10_npu::NPUStream& stream);

// The same when torch_npu queues the stream's work (task_queue.h), else the
// raw stream at once (nothing to drain).
aclrtStream launched(const c10_npu::NPUStream& stream);

}  // namespace torch_npu_ipc
