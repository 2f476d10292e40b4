#include "acl_device_guard.h"

#include "acl_table.h"

namespace torch_npu_ipc {

AclDeviceGuard::AclDeviceGuard(c10::DeviceIndex device) {
  auto get = NPU_IPC_ACL(GetDevice, "Device selection");
  auto set = NPU_IPC_ACL(SetDevice, "Device selection");
  if (handled(get(&previous_)) != ACL_SUCCESS) previous_ = -1;  // no current device yet
  if (previous_ != device) {
    check(set(device), "aclrtSetDevice");
    changed_ = true;
  }
}

AclDeviceGuard::~AclDeviceGuard() {
  if (changed_ && previous_ >= 0) (void)handled(acl().SetDevice(previous_));
}

}  // namespace torch_npu_ipc
