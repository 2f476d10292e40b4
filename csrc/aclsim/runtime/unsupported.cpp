// ACL calls torch_npu links against but the simulator does not model:
// ge operator compilation (aclop*), kernel binaries, virtual memory
// management and dumps. Each fails with an error naming what is missing;
// none pretends to succeed, so nothing silently turns into a no-op.
#include <acl/acl_op_compiler.h>

#include <string>

#include "aclsim/runtime.h"

struct aclDataBuffer {};
struct aclTensorDesc {};
struct aclopAttr {};

namespace {

aclError unsupported(const std::string& what) {
  return aclsim::fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, what + " is not simulated");
}

// Placeholders handed out so torch_npu reaches the call that reports the
// real problem (aclopCompileAndExecute) instead of failing on a null.
aclDataBuffer g_buffer;
aclTensorDesc g_desc;
aclopAttr g_attr;

}  // namespace

extern "C" {

ACLSIM_API aclError aclopCompileAndExecute(const char* opType, int, const aclTensorDesc* const[],
                                           const aclDataBuffer* const[], int, const aclTensorDesc* const[],
                                           aclDataBuffer* const[], const aclopAttr*, aclopEngineType, aclopCompileType,
                                           const char*, aclrtStream) {
  return aclsim::fail(ACL_ERROR_OP_NOT_FOUND, std::string("operator '") + (opType ? opType : "?") +
                                                  "' is not implemented by the simulator (aclsim runs only the aclnn "
                                                  "operators listed in docs/simulator.md)");
}

ACLSIM_API aclError aclopCompileAndExecuteV2(const char* opType, int, aclTensorDesc*[], aclDataBuffer*[], int,
                                             aclTensorDesc*[], aclDataBuffer*[], aclopAttr*, aclopEngineType,
                                             aclopCompileType, const char*, aclrtStream) {
  return aclopCompileAndExecute(opType, 0, nullptr, nullptr, 0, nullptr, nullptr, nullptr, ACL_ENGINE_SYS,
                                ACL_COMPILE_SYS, nullptr, nullptr);
}

ACLSIM_API aclopAttr* aclopCreateAttr() { return &g_attr; }
ACLSIM_API void aclopDestroyAttr(const aclopAttr*) {}
ACLSIM_API aclError aclopSetAttrBool(aclopAttr*, const char*, uint8_t) { return ACL_SUCCESS; }
ACLSIM_API aclError aclopSetAttrDataType(aclopAttr*, const char*, aclDataType) { return ACL_SUCCESS; }
ACLSIM_API aclError aclopSetAttrFloat(aclopAttr*, const char*, float) { return ACL_SUCCESS; }
ACLSIM_API aclError aclopSetAttrInt(aclopAttr*, const char*, int64_t) { return ACL_SUCCESS; }
ACLSIM_API aclError aclopSetAttrListBool(aclopAttr*, const char*, int, const uint8_t*) { return ACL_SUCCESS; }
ACLSIM_API aclError aclopSetAttrListFloat(aclopAttr*, const char*, int, const float*) { return ACL_SUCCESS; }
ACLSIM_API aclError aclopSetAttrListInt(aclopAttr*, const char*, int, const int64_t*) { return ACL_SUCCESS; }
ACLSIM_API aclError aclopSetAttrListListInt(aclopAttr*, const char*, int, const int*, const int64_t* const[]) {
  return ACL_SUCCESS;
}
ACLSIM_API aclError aclopSetAttrString(aclopAttr*, const char*, const char*) { return ACL_SUCCESS; }

ACLSIM_API aclDataBuffer* aclCreateDataBuffer(void*, size_t) { return &g_buffer; }
ACLSIM_API aclError aclDestroyDataBuffer(const aclDataBuffer*) { return ACL_SUCCESS; }
ACLSIM_API aclTensorDesc* aclCreateTensorDesc(aclDataType, int, const int64_t*, aclFormat) { return &g_desc; }
ACLSIM_API void aclDestroyTensorDesc(const aclTensorDesc*) {}
ACLSIM_API aclError aclGetTensorDescDimV2(const aclTensorDesc*, size_t, int64_t*) {
  return unsupported("aclGetTensorDescDimV2");
}
ACLSIM_API aclFormat aclGetTensorDescFormat(const aclTensorDesc*) { return ACL_FORMAT_ND; }
ACLSIM_API size_t aclGetTensorDescNumDims(const aclTensorDesc*) { return 0; }
ACLSIM_API aclDataType aclGetTensorDescType(const aclTensorDesc*) { return ACL_DT_UNDEFINED; }
ACLSIM_API void aclSetTensorDescName(aclTensorDesc*, const char*) {}
ACLSIM_API aclError aclSetTensorFormat(aclTensorDesc*, aclFormat) { return ACL_SUCCESS; }
ACLSIM_API aclError aclSetTensorPlaceMent(aclTensorDesc*, aclMemType) { return ACL_SUCCESS; }
ACLSIM_API aclError aclSetTensorShape(aclTensorDesc*, int, const int64_t*) { return ACL_SUCCESS; }

ACLSIM_API void aclAppLog(aclLogLevel, const char*, const char*, uint32_t, const char*, ...) {}

ACLSIM_API aclError aclmdlInitDump() { return ACL_SUCCESS; }
ACLSIM_API aclError aclmdlFinalizeDump() { return ACL_SUCCESS; }
ACLSIM_API aclError aclmdlSetDump(const char*) { return unsupported("aclmdlSetDump (model dump)"); }

ACLSIM_API aclError aclrtBinaryLoadFromData(const void*, size_t, const aclrtBinaryLoadOptions*, aclrtBinHandle*) {
  return unsupported("aclrtBinaryLoadFromData (device kernels)");
}
ACLSIM_API aclError aclrtBinaryGetFunction(const aclrtBinHandle, const char*, aclrtFuncHandle*) {
  return unsupported("aclrtBinaryGetFunction (device kernels)");
}
ACLSIM_API aclError aclrtGetFunctionAddr(aclrtFuncHandle, void**, void**) {
  return unsupported("aclrtGetFunctionAddr (device kernels)");
}

ACLSIM_API aclError aclrtReserveMemAddress(void**, size_t, size_t, void*, uint64_t) {
  return unsupported("aclrtReserveMemAddress (virtual memory management; disable expandable_segments)");
}
ACLSIM_API aclError aclrtReleaseMemAddress(void*) { return unsupported("aclrtReleaseMemAddress"); }
ACLSIM_API aclError aclrtMallocPhysical(aclrtDrvMemHandle*, size_t, const aclrtPhysicalMemProp*, uint64_t) {
  return unsupported("aclrtMallocPhysical (virtual memory management)");
}
ACLSIM_API aclError aclrtFreePhysical(aclrtDrvMemHandle) { return unsupported("aclrtFreePhysical"); }
ACLSIM_API aclError aclrtMapMem(void*, size_t, size_t, aclrtDrvMemHandle, uint64_t) {
  return unsupported("aclrtMapMem");
}
ACLSIM_API aclError aclrtUnmapMem(void*) { return unsupported("aclrtUnmapMem"); }
ACLSIM_API aclError aclrtMemExportToShareableHandle(aclrtDrvMemHandle, aclrtMemHandleType, uint64_t, uint64_t*) {
  return unsupported("aclrtMemExportToShareableHandle (use aclrtIpcMemGetExportKey)");
}
ACLSIM_API aclError aclrtMemImportFromShareableHandle(uint64_t, int32_t, aclrtDrvMemHandle*) {
  return unsupported("aclrtMemImportFromShareableHandle (use aclrtIpcMemImportByKey)");
}
ACLSIM_API aclError aclrtMemSetPidToShareableHandle(uint64_t, int32_t*, size_t) {
  return unsupported("aclrtMemSetPidToShareableHandle");
}

}  // extern "C"
