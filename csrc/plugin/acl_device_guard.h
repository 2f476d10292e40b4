// Makes `device` the calling thread's current ACL device for a scope.
//
// ACL's current device is per thread, and torch_npu sets it lazily; a
// thread that never ran an NPU op (a multiprocessing feeder thread, a
// freshly spawned process) may have none. The guard sets it through the ACL
// table and restores the previous one on exit. A thread that had none goes
// back to the device torch_npu reported for it (npu:0 unless set_device
// chose another), through torch_npu's own device guard, as a torch_npu
// device guard leaves such a thread: ACL and torch_npu's per-thread cache
// agree on it afterwards, and the thread does not stay on `device`.
#pragma once

#include <c10/core/Device.h>

namespace torch_npu_ipc {

class AclDeviceGuard {
 public:
  explicit AclDeviceGuard(c10::DeviceIndex device);
  ~AclDeviceGuard();
  AclDeviceGuard(const AclDeviceGuard&) = delete;
  AclDeviceGuard& operator=(const AclDeviceGuard&) = delete;

 private:
  int32_t previous_ = -1;  // the thread's ACL device before (-1: none)
  c10::DeviceIndex torch_device_ = -1;  // without one: the device torch_npu reported
  bool changed_ = false;
};

}  // namespace torch_npu_ipc
