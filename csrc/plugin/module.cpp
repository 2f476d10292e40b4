// Python module torch_npu_ipc._C: the plugin core's bindings.
#include "acl_table.h"
#include "bindings.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_npu_ipc C++ core";
  m.def("_acl_library_path", &torch_npu_ipc::acl_library_path,
        "Path of the libascendcl.so whose functions the plugin calls.");
  m.def("_mark_interpreter_exiting", &torch_npu_ipc::mark_interpreter_exiting,
        "Names this thread as the exiting one: once the interpreter finalizes, other threads park instead of "
        "taking the GIL back after a runtime call (registered with atexit).");
  torch_npu_ipc::bind_events(m);
  torch_npu_ipc::bind_streams(m);
  torch_npu_ipc::bind_copies(m);
  torch_npu_ipc::bind_sharing(m);
}
