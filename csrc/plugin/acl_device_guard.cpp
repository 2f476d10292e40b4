#include "acl_device_guard.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "acl_table.h"

namespace torch_npu_ipc {
namespace {

const c10::impl::DeviceGuardImplInterface* npu_guard() {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
}

}  // namespace

AclDeviceGuard::AclDeviceGuard(c10::DeviceIndex device) {
  auto get = NPU_IPC_ACL(GetDevice, "Device selection");
  auto set = NPU_IPC_ACL(SetDevice, "Device selection");
  if (handled(get(&previous_)) != ACL_SUCCESS) previous_ = -1;  // no current device yet
  if (previous_ == device) return;
  if (previous_ < 0) {
    // Asked before the ACL device changes, torch_npu answers from its own
    // state (a lazy set_device) or with its default, npu:0.
    try {
      torch_device_ = npu_guard()->getDevice().index();
    } catch (const std::exception&) {
      torch_device_ = 0;
    }
  }
  check(set(device), "aclrtSetDevice");
  changed_ = true;
}

AclDeviceGuard::~AclDeviceGuard() {
  if (!changed_) return;
  if (previous_ >= 0) {
    (void)handled(acl().SetDevice(previous_));
  } else {
    // torch_npu's restore (noexcept) also updates its per-thread cache, which
    // torch_npu calls made inside the scope may have filled with `device`.
    npu_guard()->uncheckedSetDevice(c10::Device(c10::DeviceType::PrivateUse1, torch_device_));
  }
}

}  // namespace torch_npu_ipc
