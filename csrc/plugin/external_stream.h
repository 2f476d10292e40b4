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

#include "acl_abi.h"
#include <c10/core/Device.h>
#include <c10/core/Allocator.h>

#include <functional>
#include <string>

#include "npu_stream.h"

namespace torch_npu_ipc {

// True when this torch_npu exports c10_npu::getStreamFromExternal.
bool has_stream_from_external();

// True when `stream` is one of torch_npu's external streams (made by
// getStreamFromExternal, for this plugin's ExternalStream or torch_npu's
// own), on which torch_npu refuses event records, synchronize and query.
// torch_npu 2.13 numbers them 0x40000000 + n per device, apart from its own
// streams (type << 5 | index); test_external_stream pins that for each kind.
bool is_external(const c10_npu::NPUStream& stream);

// NPUCachingAllocator::recordStream for an external stream. torch_npu
// records an event on each stream a block was marked with when the block is
// freed, and refuses to on an external stream: thrown inside the block's
// deleter, that aborts the process. A pool stream of the device, made to wait
// for the work queued on `external` so far, carries the mark instead.
void record_external_use(const c10::DataPtr& ptr, const c10_npu::NPUStream& external);

// Runs `f` (work torch_npu queues on the current stream) with a pool stream
// of `external`'s device current instead of `external`, ordered after the
// work queued on `external` so far, then orders `external` after it. For
// what torch_npu cannot do on an external stream at all: a non_blocking copy
// with pinned host memory, whose host allocator records an event on the
// copy's stream when the pinned block is freed and aborts the process on an
// external one (copy_hook.cpp).
void run_beside_external(const c10_npu::NPUStream& external, const std::function<void()>& f);

// torch_npu's stream for the foreign `stream` on `device` (the same stream
// each time for the same pointer and device). Throws when the entry point is
// missing.
StreamRef stream_from_external(aclrtStream stream, c10::DeviceIndex device);

// What the runtime says of `stream` with `device` current.
struct StreamProbe {
  // "" when the runtime takes work on the stream, else its complaint.
  std::string problem;
  // The handle is live (aclrtStreamQuery took it) but queuing work on it was
  // refused with ACL_ERROR_RT_STREAM_CONTEXT: the stream belongs to another
  // device's (or another) context. CANN, and aclsim like it, check this on
  // aclrtRecordEvent, not on aclrtStreamQuery.
  bool other_context = false;
};

// Probes `stream` with `device` current: aclrtStreamQuery (is the handle
// live), then aclrtRecordEvent of a private pooled event (does the runtime
// queue work on it from this device's context). The record is the only side
// effect: an event nobody waits for, on the foreign stream.
StreamProbe probe_stream(aclrtStream stream, c10::DeviceIndex device);

// The device, other than `except`, whose primary context takes work on
// `stream` (only devices whose primary context is already active are tried,
// so no device is initialized), or -1 when none does.
int find_stream_device(aclrtStream stream, c10::DeviceIndex except);

// Host waits for everything queued on the raw stream.
void synchronize_stream(aclrtStream stream, c10::DeviceIndex device);

// Proxy path (streams.py): torch_npu's pool stream `proxy` of `device` stands
// for the foreign `stream`; a pool stream may stand for several. Events that
// torch records on a proxy, or makes it wait for, through c10's device guard
// (torch.Event, the autograd engine) are ordered with the foreign streams as
// ExternalStream's own record and wait are (event_guard.cpp).
// Called for each ExternalStream object on the proxy path, and forget_proxy
// when that object is collected: a foreign stream no object wraps any more
// may be destroyed by its owner, and is not ordered with any longer.
void note_proxy(c10::DeviceIndex device, c10::StreamId proxy, aclrtStream stream);
void forget_proxy(c10::DeviceIndex device, c10::StreamId proxy, aclrtStream stream);
// Before an event is recorded on `s`: if it is a proxy, it waits for the
// work queued on its foreign streams so far.
void proxy_before_record(const c10::Stream& s);
// After `s` was made to wait for an event: if it is a proxy, its foreign
// streams wait for it.
void proxy_after_wait(const c10::Stream& s);

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
