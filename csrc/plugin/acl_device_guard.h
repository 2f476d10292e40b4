// Makes `device` the calling thread's current ACL device for a scope.
//
// ACL's current device is per thread, and torch_npu sets it lazily; a
// thread that never ran an NPU op (a multiprocessing feeder thread, a
// freshly spawned process) may have none. The guard sets it through the ACL
// table and restores the previous one on exit.
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
  int32_t previous_ = -1;
  bool changed_ = false;
};

}  // namespace torch_npu_ipc
