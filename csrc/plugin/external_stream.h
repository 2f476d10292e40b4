// External streams: aclrtStreams that another library created and owns.
//
// torch_npu launches its ops on such a stream through
// c10_npu::getStreamFromExternal (torch_npu 2.13 and a few post releases),
// looked up at run time so the plugin still loads on versions without it.
// Everything torch_npu refuses to do on an external stream (synchronize,
// query, event record / wait) is done here by calling ACL on the raw
// stream; callers drain torch_npu's task queue first (npu_stream.h), so the
// ACL call is ordered after every op launched on the stream before it.
//
// The plugin never creates or destroys a foreign stream.
#pragma once

#include <acl/acl.h>
#include <c10/core/Device.h>

#include <string>

#include "npu_stream.h"

namespace torch_npu_ipc {

// True when this torch_npu exports c10_npu::getStreamFromExternal.
bool has_stream_from_external();

// torch_npu's stream for the foreign `stream` on `device` (the same stream
// each time for the same pointer and device). Throws when the entry point is
// missing.
StreamRef stream_from_external(aclrtStream stream, c10::DeviceIndex device);

// "" when the runtime accepts `stream` with `device` current, else the
// runtime's complaint (a destroyed or forged handle, a stream of another
// device's context where the runtime checks that).
std::string probe_stream(aclrtStream stream, c10::DeviceIndex device);

// Host waits for everything queued on the raw stream.
void synchronize_stream(aclrtStream stream, c10::DeviceIndex device);

// True when everything queued on the raw stream has completed.
bool query_stream(aclrtStream stream, c10::DeviceIndex device);

// aclrtRecordEvent / aclrtStreamWaitEvent on a raw stream, with `device` current.
void record_event(aclrtEvent event, aclrtStream stream, c10::DeviceIndex device);
void wait_event(aclrtStream stream, aclrtEvent event, c10::DeviceIndex device);

// Work queued on `waiter` from now on waits for the work queued on
// `signaller` so far (both streams of `device`), through a pooled event.
// Neither the host nor `signaller` waits.
void order_streams(aclrtStream waiter, aclrtStream signaller, c10::DeviceIndex device);

}  // namespace torch_npu_ipc
