// Python bindings of the event-synchronized cross-device copy.
#include <pybind11/stl.h>

#include "bindings.h"
#include "copy_barrier.h"
#include "copy_hook.h"
#include "event_guard.h"
#include "task_queue.h"

namespace py = pybind11;

namespace torch_npu_ipc {
namespace {

CopyMode mode_of(bool synchronize) { return synchronize ? CopyMode::kSynchronize : CopyMode::kEvents; }

}  // namespace

void bind_copies(py::module_& m) {
  m.def(
      "_copies_enable", [](bool synchronize) { copies_enable(mode_of(synchronize)); }, py::arg("synchronize") = false,
      "Hook the event-barrier cross-device copy into aten::copy_ / aten::_to_copy.");
  m.def("_copies_dispatch_key", &copies_dispatch_key,
        "The dispatch key the hook registers at: PrivateUse1 (torch >= 2.9) or BackendSelect (older torch).");
  m.def("_copies_disable", &copies_disable, "Remove the hook: torch_npu's own copy kernels run again.");
  m.def("_copies_enabled", &copies_enabled);
  m.def("_copies_mode",
        [] { return std::string(copies_mode() == CopyMode::kSynchronize ? "synchronize" : "events"); });
  m.def("_copies_event_unsupported_reason", &copies_event_unsupported_reason, py::arg("device"),
        "Why cross-device copies cannot use events in this process ('' when they can).");
  m.def("_copies_queued", &copies_queued,
        "Whether barrier copies on the current streams go through torch_npu's task queues.");
  m.def("_copies_stats", [] {
    BarrierStats s = barrier_stats();
    py::dict d;
    d["event_copies"] = s.event_copies;
    d["sync_copies"] = s.sync_copies;
    d["delegated"] = copies_delegated();
    d["signal_wait_ns"] = s.signal_wait_ns;
    d["queue_full_waits"] = s.queue_full_waits;
    d["out_of_events_copies"] = s.out_of_events_copies;
    return d;
  });
  m.def("_event_guard_install", &event_guard_install, py::arg("order_events"),
        "Wrap torch_npu's device guard (once); order_events: make a c10::Event's waits follow its record and its "
        "destroy follow other devices' waits.");
  m.def("_event_guard_stats", [] {
    EventGuardStats s = event_guard_stats();
    py::dict d;
    d["ordering"] = event_guard_ordering();
    d["wrapped"] = event_guard_wrapped();
    d["deferred_destroys"] = s.deferred_destroys;
    d["gated_waits"] = s.gated_waits;
    d["tracked_events"] = s.tracked_events;
    return d;
  });
  py::class_<QueueHold>(m, "_QueueHold",
                        "Holds torch_npu's task queue of a device's current stream until release() (tests).")
      .def(py::init([](int device, double timeout_s, bool fail) {
             return std::make_unique<QueueHold>(static_cast<c10::DeviceIndex>(device),
                                                std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)),
                                                fail ? ACL_ERROR_INTERNAL_ERROR : ACL_SUCCESS);
           }),
           py::arg("device"), py::arg("timeout_s") = 60.0, py::arg("fail") = false)
      .def("release", &QueueHold::release);
}

}  // namespace torch_npu_ipc
