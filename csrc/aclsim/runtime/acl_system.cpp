// Process-level ACL calls: init/finalize, versions, SoC, capabilities and
// the settings torch_npu applies at start-up. The simulator accepts the
// settings and reports a fixed, honest description of itself.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include <acl/acl_op_compiler.h>

#include "config.h"
#include "device.h"

using namespace aclsim;

namespace {

std::atomic<bool> g_initialized{false};

// The CANN release the simulator reports; CANN 8.5 is what torch_npu 2.13
// is built against.
constexpr const char* kCannVersion = "8.5.0";
constexpr const char* kDriverVersion = "25.5.0";

void fill_version(aclCANNPackageVersion* v, const char* text) {
  std::memset(v, 0, sizeof(*v));
  std::snprintf(v->version, sizeof(v->version), "%s", text);
  int major = 0, minor = 0, release = 0;
  std::sscanf(text, "%d.%d.%d", &major, &minor, &release);
  std::snprintf(v->majorVersion, sizeof(v->majorVersion), "%d", major);
  std::snprintf(v->minorVersion, sizeof(v->minorVersion), "%d", minor);
  std::snprintf(v->releaseVersion, sizeof(v->releaseVersion), "%d", release);
  std::snprintf(v->patchVersion, sizeof(v->patchVersion), "0");
}

}  // namespace

extern "C" {

ACLSIM_API aclError aclInit(const char* /*configPath*/) {
  if (g_initialized.exchange(true)) return ACL_ERROR_REPEAT_INITIALIZE;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclFinalize() {
  g_initialized = false;
  return ACL_SUCCESS;
}

ACLSIM_API const char* aclrtGetSocName() { return config().soc.c_str(); }

ACLSIM_API aclError aclsysGetCANNVersion(aclCANNPackageName name, aclCANNPackageVersion* version) {
  if (version == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclsysGetCANNVersion: null output");
  if (name < ACL_PKG_NAME_CANN || name > ACL_PKG_NAME_DRIVER) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclsysGetCANNVersion: unknown package");
  }
  fill_version(version, name == ACL_PKG_NAME_DRIVER ? kDriverVersion : kCannVersion);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclsysGetVersionStr(char* pkgName, char* versionStr) {
  if (pkgName == nullptr || versionStr == nullptr) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclsysGetVersionStr: null argument");
  }
  std::snprintf(versionStr, ACL_PKG_VERSION_MAX_SIZE, "%s", kCannVersion);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclGetCannAttribute(aclCannAttr attr, int32_t* value) {
  if (value == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclGetCannAttribute: null output");
  // INF_NAN and BF16 are supported by Atlas A2; JIT compilation is not.
  *value = attr == ACL_CANN_ATTR_INF_NAN || attr == ACL_CANN_ATTR_BF16 ? 1 : 0;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclGetDeviceCapability(uint32_t deviceId, aclDeviceInfo info, int64_t* value) {
  if (value == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclGetDeviceCapability: null output");
  if (!valid_device(static_cast<int>(deviceId))) {
    return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclGetDeviceCapability: invalid device");
  }
  switch (info) {
    case ACL_DEVICE_INFO_AI_CORE_NUM: *value = 24; break;
    case ACL_DEVICE_INFO_VECTOR_CORE_NUM: *value = 48; break;
    case ACL_DEVICE_INFO_L2_SIZE: *value = 192 << 20; break;
    default: return fail(ACL_ERROR_INVALID_PARAM, "aclGetDeviceCapability: unknown attribute");
  }
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtGetSysParamOpt(aclSysParamOpt /*opt*/, int64_t* value) {
  if (value == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetSysParamOpt: null output");
  *value = 0;
  return ACL_SUCCESS;
}
ACLSIM_API aclError aclrtSetSysParamOpt(aclSysParamOpt, int64_t) { return ACL_SUCCESS; }
ACLSIM_API aclError aclrtCtxSetSysParamOpt(aclSysParamOpt, int64_t) { return ACL_SUCCESS; }
ACLSIM_API aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode) { return ACL_SUCCESS; }
ACLSIM_API aclError aclrtSetOpWaitTimeout(uint32_t) { return ACL_SUCCESS; }
ACLSIM_API aclError aclrtSetOpExecuteTimeOut(uint32_t) { return ACL_SUCCESS; }
ACLSIM_API aclError aclrtSetOpExecuteTimeOutV2(uint64_t timeout, uint64_t* actualTimeout) {
  if (actualTimeout != nullptr) *actualTimeout = timeout;
  return ACL_SUCCESS;
}

ACLSIM_API size_t aclGetCompileoptSize(aclCompileOpt /*opt*/) { return 64; }

ACLSIM_API aclError aclGetCompileopt(aclCompileOpt opt, char* value, size_t length) {
  if (value == nullptr || length == 0) return fail(ACL_ERROR_INVALID_PARAM, "aclGetCompileopt: null buffer");
  // Only the JIT switch is asked for; the simulator compiles nothing.
  std::snprintf(value, length, "%s", opt == ACL_OP_JIT_COMPILE ? "disable" : "");
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclSetCompileopt(aclCompileOpt, const char*) { return ACL_SUCCESS; }

ACLSIM_API aclError aclrtProcessReport(int32_t /*timeout*/) {
  return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclrtProcessReport: callbacks are not simulated");
}

}  // extern "C"
