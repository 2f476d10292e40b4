// Python bindings of interprocess events and their manager.
#include <pybind11/stl.h>

#include "acl_table.h"
#include "bindings.h"
#include "event_manager.h"
#include "ipc_event.h"
#include "npu_stream.h"

namespace py = pybind11;

namespace torch_npu_ipc {
namespace {

using Triple = std::tuple<int64_t, int64_t, int64_t>;

c10_npu::NPUStream stream_of(const Triple& s) {
  return to_npu_stream(StreamRef{std::get<0>(s), std::get<1>(s), std::get<2>(s)});
}

}  // namespace

void bind_events(py::module_& m) {
  py::class_<IpcEvent, std::shared_ptr<IpcEvent>>(m, "_IpcEvent")
      .def_static("create", released(&IpcEvent::create), py::arg("device"))
      .def_static(
          "open",
          [](c10::DeviceIndex device, py::bytes handle) {
            std::string h = handle;
            return without_gil([&] { return IpcEvent::open(device, h); });
          },
          py::arg("device"), py::arg("handle"))
      .def_static("acquire", released(+[](c10::DeviceIndex device) { return EventManager::get().acquire(device); }),
                  py::arg("device"))
      .def("record", released(+[](IpcEvent& e, const Triple& s) { e.record(stream_of(s)); }), py::arg("stream"))
      .def("wait", released(+[](IpcEvent& e, const Triple& s) { e.wait(stream_of(s)); }), py::arg("stream"))
      .def("query", released(&IpcEvent::query))
      .def("synchronize", released(&IpcEvent::synchronize))
      .def("handle",
           [](IpcEvent& e) {
             return py::bytes(without_gil([&] { return e.handle(); }));
           })
      .def_property_readonly("device", &IpcEvent::device)
      .def_property_readonly("imported", &IpcEvent::imported)
      .def_property_readonly("ptr", [](const IpcEvent& e) { return reinterpret_cast<uintptr_t>(e.raw()); });

  m.def(
      "_event_collect", released(+[](bool force) { EventManager::get().collect(force); }), py::arg("force") = false);
  m.def("_event_stats", [] {
    EventStats s = EventManager::get().stats();
    py::dict d;
    d["created"] = s.created;
    d["destroyed"] = s.destroyed;
    d["retired_pending"] = s.retired_pending;
    d["pooled"] = s.pooled;
    return d;
  });
  m.def("_ipc_event_unsupported_reason", &ipc_events_unsupported_reason, py::arg("device"),
        "Why interprocess events cannot work here ('' when they can); probed once.");
}

}  // namespace torch_npu_ipc
