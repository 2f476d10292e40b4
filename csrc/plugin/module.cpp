// Python bindings of the plugin core (torch_npu_ipc._C).
#include <torch/extension.h>

#include "acl_table.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_npu_ipc C++ core";
  m.def("_acl_library_path", &torch_npu_ipc::acl_library_path,
        "Path of the libascendcl.so whose functions the plugin calls.");
}
