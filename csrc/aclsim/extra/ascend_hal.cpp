// libascend_hal.so: the driver entry torch_npu's Python side calls through
// ctypes to count devices. It agrees with aclrtGetDeviceCount.
#include <cstdint>

#include "aclsim/runtime.h"

extern "C" {

ACLSIM_API int drvGetDevNum(uint32_t* num) {
  if (num == nullptr) return 1;
  return aclrtGetDeviceCount(num) == ACL_SUCCESS ? 0 : 1;
}

}  // extern "C"
