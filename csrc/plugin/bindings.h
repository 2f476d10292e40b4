// One binder per feature; module.cpp calls them all.
#pragma once

#include <torch/extension.h>

#include "gil.h"

namespace torch_npu_ipc {

void bind_events(pybind11::module_& m);
void bind_streams(pybind11::module_& m);
void bind_copies(pybind11::module_& m);
void bind_sharing(pybind11::module_& m);

}  // namespace torch_npu_ipc
