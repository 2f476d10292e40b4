// Python bindings of NPU tensor sharing between processes.
#include <pybind11/stl.h>

#include "bindings.h"
#include "exit_fencer.h"
#include "ipc_memory.h"
#include "npu_format.h"
#include "npu_stream.h"
#include "queue_error.h"
#include "sharing.h"

namespace py = pybind11;

namespace torch_npu_ipc {
namespace {

using Fields = std::tuple<int32_t, int64_t, py::bytes, uint64_t, uint64_t, uint64_t, std::string, uint32_t, uint32_t,
                          py::bytes>;

Fields to_fields(const Descriptor& d) {
  return {d.producer_pid,   d.device,     py::bytes(d.mem_key), d.block_size,      d.storage_offset,
          d.storage_nbytes, d.ref_table, d.slot_index,          d.slot_generation, py::bytes(d.event_handle)};
}

Descriptor from_fields(const Fields& f) {
  Descriptor d;
  d.producer_pid = std::get<0>(f);
  d.device = std::get<1>(f);
  d.mem_key = std::get<2>(f);
  d.block_size = std::get<3>(f);
  d.storage_offset = std::get<4>(f);
  d.storage_nbytes = std::get<5>(f);
  d.ref_table = std::get<6>(f);
  d.slot_index = std::get<7>(f);
  d.slot_generation = std::get<8>(f);
  d.event_handle = std::get<9>(f);
  return d;
}

// Where a failed queue's report may reach the plugin on a thread the user
// does not watch (queue_error.h).
constexpr const char* kSharing =
    "while sharing a tensor (a multiprocessing queue's feeder thread does that for the tensors given to put())";
constexpr const char* kRebuilding = "while rebuilding a received tensor";

}  // namespace

void bind_sharing(py::module_& m) {
  m.def(
      "_share_storage",
      [](const at::Tensor& t) {
        TORCH_CHECK_VALUE(base_format(t), "cannot share a tensor in torch_npu's private format ", npu_format(t),
                          " (FRACTAL_NZ is 29): a receiver would read its tiles as plain elements; send "
                          "torch_npu.npu_format_cast(tensor, 2) (ND) instead");
        return to_fields(without_gil([&] {
          return keeping_queue_report(kSharing, [&] { return share_storage(t.storage()); });
        }));
      },
      py::arg("tensor"), "Share the storage of an NPU tensor; returns the descriptor fields.");
  m.def(
      "_rebuild_tensor",
      [](const Fields& f, int64_t device, at::ScalarType dtype, const std::vector<int64_t>& sizes,
         const std::vector<int64_t>& strides, int64_t storage_offset) {
        Descriptor d = from_fields(f);
        return without_gil([&] {
          return keeping_queue_report(kRebuilding,
                                      [&] { return rebuild_tensor(d, device, dtype, sizes, strides, storage_offset); });
        });
      },
      py::arg("fields"), py::arg("device"), py::arg("dtype"), py::arg("sizes"), py::arg("strides"),
      py::arg("storage_offset"),
      "The tensor another process shared, with its exact layout, in one call (bounds validated by the caller).");
  m.def(
      "_record_shared_use",
      [](const at::Tensor& t, const std::tuple<int64_t, int64_t, int64_t>& s) {
        const c10_npu::NPUStream stream =
            to_npu_stream(StreamRef{std::get<0>(s), std::get<1>(s), std::get<2>(s)});
        return record_shared_use(t.storage().data_ptr(), stream);
      },
      py::arg("tensor"), py::arg("stream"),
      "Tensor.record_stream for shared or received memory; False (nothing done) for any other tensor.");
  m.def("_ipc_collect", released(&ipc_collect), py::arg("force") = false);
  m.def("_request_exit_fence", &request_exit_fence,
        "Ask receivers to fence the tensors of this process they still hold (the exit wait).");
  m.def("_mark_exit_waited", &mark_exit_waited,
        "The exit wait ended: receivers that find this process gone leave the warning to it.");
  m.def("_quiet_vanished_producers", &quiet_vanished_producers,
        "This process is exiting: producers that end from now on are not reported.");
  m.def("_inflight_budget", &inflight_budget);
  m.def("_withdraw_unreceived_forwards", &withdraw_unreceived_forwards,
        "At exit: free the original producers' slots of forwards nobody received (they need this process's event).");
  m.def("_export_keys_tracked", &export_keys_tracked,
        "True when torch_npu's allocator reports each segment free to the export-key cache (trace tracker).");
  m.def("_export_keys_forget", &export_keys_forget,
        "Close the cached export keys no shared block holds (around reset_accumulated_memory_stats).");
  m.def("_out_of_events_sends", [] { return sharing_out_of_events_sends(); },
        "Sends so far that synchronized because their device had no IPC event left.");
  m.def("_sharing_stats", [] {
    SharingStats s = sharing_stats();
    py::dict d;
    d["inflight_events"] = s.inflight_events;
    d["limbo_blocks"] = s.limbo_blocks;
    d["live_slots"] = s.live_slots;
    d["live_slots_self"] = s.live_slots_self;
    d["unreceived_slots"] = s.unreceived_slots;
    d["releasing_slots"] = s.releasing_slots;
    d["fenced_slots"] = s.fenced_slots;
    d["unreceived_forwards"] = s.unreceived_forwards;
    d["fallback_syncs"] = s.fallback_syncs;
    d["out_of_events_sends"] = s.out_of_events_sends;
    d["no_ipc_event_sends"] = s.no_ipc_event_sends;
    d["in_fallback"] = s.in_fallback;
    d["release_syncs"] = s.release_syncs;
    d["out_of_memory_waits"] = s.out_of_memory_waits;
    return d;
  });
}

}  // namespace torch_npu_ipc
