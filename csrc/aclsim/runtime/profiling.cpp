// Profiler (Msprof*) and legacy runtime (rt*) entry points that
// libtorch_npu.so imports at load time. Their declarations live in CANN's
// profiling and runtime headers, which the wheel does not ship in full, so
// they are declared here with the same C signatures. Profiling is accepted
// and discarded; kernel launch through the legacy API is not simulated.
#include <cstddef>
#include <cstdint>

#define ACLSIM_API __attribute__((visibility("default")))

namespace {
constexpr int32_t kRtFeatureNotSupport = 207000;
}

extern "C" {

using ProfCommandHandle = int32_t (*)(uint32_t type, void* data, uint32_t len);

ACLSIM_API uint64_t MsprofGetHashId(const char* info, size_t length) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; info != nullptr && i < length; ++i) {
    h = (h ^ static_cast<unsigned char>(info[i])) * 1099511628211ull;
  }
  return h;
}
ACLSIM_API int32_t MsprofRegisterCallback(uint32_t, ProfCommandHandle) { return 0; }
ACLSIM_API int32_t MsprofReportAdditionalInfo(uint32_t, const void*, uint32_t) { return 0; }
ACLSIM_API int32_t MsprofReportApi(uint32_t, const void*) { return 0; }
ACLSIM_API int32_t MsprofReportCompactInfo(uint32_t, const void*, uint32_t) { return 0; }
ACLSIM_API uint64_t MsprofSysCycleTime(void) { return 0; }

ACLSIM_API int32_t rtDevBinaryRegister(const void*, void**) { return kRtFeatureNotSupport; }
ACLSIM_API int32_t rtFunctionRegister(void*, const void*, const char*, const void*, uint32_t) {
  return kRtFeatureNotSupport;
}
ACLSIM_API int32_t rtKernelLaunch(const void*, uint32_t, void*, uint32_t, void*, void*) { return kRtFeatureNotSupport; }
ACLSIM_API int32_t rtGetC2cCtrlAddr(uint64_t*, uint32_t*) { return kRtFeatureNotSupport; }

}  // extern "C"
