// Python bindings of external streams (torch_npu_ipc/streams.py).
#include <pybind11/stl.h>

#include "bindings.h"
#include "external_stream.h"
#include "npu_stream.h"

namespace py = pybind11;

namespace torch_npu_ipc {
namespace {

using Triple = std::tuple<int64_t, int64_t, int64_t>;

template <class T>
T* as_ptr(uint64_t value) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(value));
}

uint64_t as_int(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

}  // namespace

void bind_streams(py::module_& m) {
  m.def("_stream_from_external_available", &has_stream_from_external,
        "True when torch_npu exports c10_npu::getStreamFromExternal.");
  m.def(
      "_stream_from_external",
      released(+[](uint64_t ptr, c10::DeviceIndex device) {
        StreamRef r = stream_from_external(as_ptr<void>(ptr), device);
        return Triple{r.stream_id, r.device_index, r.device_type};
      }),
      py::arg("stream_ptr"), py::arg("device"),
      "(stream_id, device_index, device_type) of torch_npu's stream for a foreign aclrtStream.");
  m.def(
      "_is_external_stream",
      [](const Triple& s) {
        return is_external(to_npu_stream(StreamRef{std::get<0>(s), std::get<1>(s), std::get<2>(s)}));
      },
      py::arg("stream"), "True when the (stream_id, device_index, device_type) stream is an external one.");
  m.def(
      "_drain",
      released(+[](const Triple& s) {
        aclrtStream raw = drained(to_npu_stream(StreamRef{std::get<0>(s), std::get<1>(s), std::get<2>(s)}));
        TORCH_CHECK(raw != nullptr, "torch_npu failed to flush its task queue for npu:", std::get<1>(s));
        return as_int(raw);
      }),
      py::arg("stream"),
      "Hand everything torch_npu queued for the stream to the runtime; return the raw stream.");
  m.def(
      "_ext_probe",
      released(+[](uint64_t ptr, c10::DeviceIndex device) {
        StreamProbe p = probe_stream(as_ptr<void>(ptr), device);
        return std::make_tuple(p.problem, p.other_context);
      }),
      py::arg("stream_ptr"), py::arg("device"),
      "(problem, other_context): problem is '' when the runtime takes work on the stream with `device` "
      "current; other_context is True when it refused it as a stream of another context.");
  m.def(
      "_ext_stream_device",
      released(+[](uint64_t ptr, c10::DeviceIndex except) { return find_stream_device(as_ptr<void>(ptr), except); }),
      py::arg("stream_ptr"), py::arg("except_device"),
      "The active device other than except_device whose context takes work on the stream, or -1.");
  m.def(
      "_ext_synchronize",
      released(+[](uint64_t ptr, c10::DeviceIndex device) { synchronize_stream(as_ptr<void>(ptr), device); }),
      py::arg("stream_ptr"), py::arg("device"));
  m.def(
      "_ext_query",
      released(+[](uint64_t ptr, c10::DeviceIndex device) { return query_stream(as_ptr<void>(ptr), device); }),
      py::arg("stream_ptr"), py::arg("device"));
  m.def(
      "_ext_record_event",
      released(+[](uint64_t event, uint64_t stream, c10::DeviceIndex device) {
        record_event(as_ptr<void>(event), as_ptr<void>(stream), device);
      }),
      py::arg("event_ptr"), py::arg("stream_ptr"), py::arg("device"));
  m.def(
      "_ext_wait_event",
      released(+[](uint64_t stream, uint64_t event, c10::DeviceIndex device) {
        wait_event(as_ptr<void>(stream), as_ptr<void>(event), device);
      }),
      py::arg("stream_ptr"), py::arg("event_ptr"), py::arg("device"));
  m.def(
      "_ext_order",
      released(+[](uint64_t waiter, uint64_t signaller, c10::DeviceIndex device) {
        order_streams(as_ptr<void>(waiter), as_ptr<void>(signaller), device);
      }),
      py::arg("waiter"), py::arg("signaller"), py::arg("device"));
  m.def(
      "_note_proxy",
      [](c10::DeviceIndex device, int64_t proxy_id, uint64_t stream) {
        note_proxy(device, static_cast<c10::StreamId>(proxy_id), as_ptr<void>(stream));
      },
      py::arg("device"), py::arg("proxy_id"), py::arg("stream"),
      "Proxy path: c10 events recorded on or waited for by the proxy are ordered with the foreign stream.");
  m.def(
      "_forget_proxy",
      [](c10::DeviceIndex device, int64_t proxy_id, uint64_t stream) {
        forget_proxy(device, static_cast<c10::StreamId>(proxy_id), as_ptr<void>(stream));
      },
      py::arg("device"), py::arg("proxy_id"), py::arg("stream"),
      "The last ExternalStream of the foreign stream is gone: stop ordering the proxy with it.");
}

}  // namespace torch_npu_ipc
