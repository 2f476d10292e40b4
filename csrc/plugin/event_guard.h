// Orders torch_npu's c10::Event calls across two devices' task queues: a wait
// after its record, a destroy after every wait.
//
// torch_npu 2.13 bug (autograd engine, task queue on, one queue per device):
// InputBuffer::add records a c10::Event on the producer device's stream,
// makes the consumer device's stream wait on it and drops it. The record and
// the destroy (NPUGuardImpl::destroyEvent queues a lazy destroy, which calls
// aclrtDestroyEvent at once where aclrtCreateEventExWithFlag exists) go to
// the producer's queue, the wait to the consumer's, and nothing orders the two
// queues: when the producer's queue runs first, the wait names a dead handle
// ("aclrtStreamWaitEvent: invalid event handle") and the consumer's queue
// refuses all later work. A backward pass across devices hits it within a few
// iterations. And nothing orders the wait after the record either: a wait
// that reaches the runtime first waits for nothing, and the consumer reads the
// gradient before it is written (seen as wrong gradients with several threads
// running backward passes across devices). torch_npu orders both only with
// per-stream queues.
//
// The fix wraps torch_npu's DeviceGuardImplInterface for PrivateUse1 (what
// c10::Event and the autograd engine call) and forwards every call to it,
// remembering which other devices blocked on each event. A wait on another
// device's event is held in its queue until the event's queue reached the
// point where the wait was asked for (a group of two queued calls, see
// task_queue.h), so it reaches the runtime after the record. Destroying an event
// that another device's queue waits on becomes one queued group (task_queue.h):
// a marker behind the wait in each waiting device's queue, and, in the
// event's device's queue where torch_npu would put its destroy, a call that
// waits for the markers and then destroys the handle. Other events, and every
// other call, go straight to torch_npu.
#pragma once

#include <cstdint>

namespace torch_npu_ipc {

// Puts the wrapper in c10's guard registry for PrivateUse1 (once) and turns
// the ordering of event calls on or off. False when torch_npu registered no
// guard implementation, or this build targets a torch older than 2.13.
//
// The wrapper also routes recordDataPtrOnStream (what torch itself calls to
// record memory on a stream: a Future's value, autograd's buffers) through
// record_shared_use (sharing.h), with or without the ordering.
bool event_guard_install(bool order_events);
bool event_guard_ordering();  // the ordering is on
bool event_guard_wrapped();    // the wrapper is in the registry

struct EventGuardStats {
  uint64_t deferred_destroys = 0;  // destroys queued behind another device's wait
  uint64_t gated_waits = 0;        // waits held until the other device's queue issued the record
  uint64_t tracked_events = 0;     // events recorded through the wrapper and not yet destroyed
};
EventGuardStats event_guard_stats();

}  // namespace torch_npu_ipc
