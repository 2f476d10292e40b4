// libhccl.so: collective communication is not simulated. torch_npu needs the
// library to load and applies one setting at start-up (HcclSetConfig); that
// is accepted. Collectives are absent, so torch_npu reports them missing if
// a program asks for a process group.
#include <cstdint>

#define ACLSIM_API __attribute__((visibility("default")))

extern "C" {

union HcclConfigValue {
  int32_t value;
};

ACLSIM_API int32_t HcclSetConfig(int32_t /*config*/, HcclConfigValue /*value*/) { return 0; }

}  // extern "C"
