// ACL device and context calls.

#include <string>

#include "config.h"
#include "device.h"
#include "process.h"
#include "stream.h"

using namespace aclsim;

namespace aclsim {

// Waits for every stream of device `dev`. timeout_ms < 0 waits forever.
aclError synchronize_device(int dev, int32_t timeout_ms) {
  aclError first = ACL_SUCCESS;
  for (const auto& s : stream_table().all()) {
    if (s->device() != dev) continue;
    aclError rc = s->synchronize(timeout_ms);
    if (rc != ACL_SUCCESS && first == ACL_SUCCESS) first = rc;
  }
  return first;
}

}  // namespace aclsim

namespace {

aclError check_device(int32_t id, const char* call) {
  if (!valid_device(id)) {
    return fail(ACL_ERROR_RT_INVALID_DEVICEID, std::string(call) + ": device " + std::to_string(id) +
                                                   " does not exist (" + std::to_string(config().device_count()) +
                                                   " simulated devices; set ACLSIM_DEVICES)");
  }
  return ACL_SUCCESS;
}

}  // namespace

extern "C" {

ACLSIM_API aclError aclrtGetDeviceCount(uint32_t* count) {
  if (count == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: null output");
  *count = static_cast<uint32_t>(config().device_count());
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtSetDevice(int32_t deviceId) {
  if (aclError rc = check_device(deviceId, "aclrtSetDevice"); rc != ACL_SUCCESS) return rc;
  {
    Device& d = device(deviceId);
    std::lock_guard<std::mutex> lock(d.mu);
    ++d.open_count;
  }
  default_stream(deviceId);
  set_current_device(deviceId);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtResetDevice(int32_t deviceId) {
  if (aclError rc = check_device(deviceId, "aclrtResetDevice"); rc != ACL_SUCCESS) return rc;
  Device& d = device(deviceId);
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.open_count > 0) --d.open_count;
  // Resources stay: other threads of the process may still use the device,
  // and a later aclrtSetDevice reopens it cheaply.
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtResetDeviceForce(int32_t deviceId) { return aclrtResetDevice(deviceId); }

ACLSIM_API aclError aclrtGetDevice(int32_t* deviceId) {
  if (deviceId == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: null output");
  // CANN answers "no device set yet" with a code and an info-level log, no
  // message for aclGetRecentErrMsg (aclrtGetDeviceImpl in hicann/runtime).
  if (current_device() < 0) return fail_quietly(ACL_ERROR_RT_CONTEXT_NULL);
  *deviceId = current_device();
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtGetCurrentContext(aclrtContext* context) {
  if (context == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetCurrentContext: null output");
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  *context = device(dev).context;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtSetCurrentContext(aclrtContext context) {
  for (int i = 0; i < config().device_count(); ++i) {
    if (device(i).context == context) {
      default_stream(i);
      set_current_device(i);
      return ACL_SUCCESS;
    }
  }
  return fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtSetCurrentContext: unknown context");
}

ACLSIM_API aclError aclrtGetPrimaryCtxState(int32_t deviceId, uint32_t* flags, int32_t* active) {
  if (aclError rc = check_device(deviceId, "aclrtGetPrimaryCtxState"); rc != ACL_SUCCESS) return rc;
  Device& d = device(deviceId);
  std::lock_guard<std::mutex> lock(d.mu);
  if (flags != nullptr) *flags = 0;
  if (active != nullptr) *active = d.open_count > 0 ? 1 : 0;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtSynchronizeDevice() {
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  count(Counter::SynchronizeDevice);
  return synchronize_device(dev, -1);
}

ACLSIM_API aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout) {
  // As CANN (aclrtSynchronizeDeviceWithTimeoutImpl): -1 means no limit.
  if (timeout < -1) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSynchronizeDeviceWithTimeout: timeout " + std::to_string(timeout) +
                                                " ms is below -1");
  }
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  count(Counter::SynchronizeDevice);
  return synchronize_device(dev, timeout);
}

ACLSIM_API aclError aclrtGetLogicDevIdByUserDevId(const int32_t userDevid, int32_t* const logicDevId) {
  if (logicDevId == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "null output");
  if (aclError rc = check_device(userDevid, "aclrtGetLogicDevIdByUserDevId"); rc != ACL_SUCCESS) return rc;
  *logicDevId = userDevid;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtDeviceGetBareTgid(int32_t* pid) {
  if (pid == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "null output");
  *pid = own_pid();
  return ACL_SUCCESS;
}

}  // extern "C"
