// libhccl.so: collective communication is not simulated. torch_npu needs the
// library to load and applies one setting at start-up (HcclSetConfig); that
// is accepted. torch_npu 2.13 looks the collectives up at run time and finds
// none, so it reports them missing if a program asks for a process group.
// Older releases (2.7.1) link the ones below directly, and the Python
// extension is loaded with immediate binding, so they must exist: each
// refuses with HCCL_E_NOT_SUPPORT.
#include <cstdint>

#define ACLSIM_API __attribute__((visibility("default")))

extern "C" {

union HcclConfigValue {
  int32_t value;
};

// HcclResult codes (hccl_types.h).
constexpr int32_t HCCL_E_NOT_SUPPORT = 5;

using HcclComm = void*;
using AclStream = void*;

ACLSIM_API int32_t HcclSetConfig(int32_t /*config*/, HcclConfigValue /*value*/) { return 0; }

ACLSIM_API int32_t HcclGetRootInfo(void* /*root_info*/) { return HCCL_E_NOT_SUPPORT; }
ACLSIM_API int32_t HcclCommInitRootInfo(uint32_t /*ranks*/, const void* /*root_info*/, uint32_t /*rank*/,
                                        HcclComm* /*comm*/) {
  return HCCL_E_NOT_SUPPORT;
}
ACLSIM_API int32_t HcclCommInitAll(uint32_t /*devices*/, int32_t* /*device_ids*/, HcclComm* /*comms*/) {
  return HCCL_E_NOT_SUPPORT;
}
ACLSIM_API int32_t HcclCommDestroy(HcclComm /*comm*/) { return HCCL_E_NOT_SUPPORT; }
ACLSIM_API int32_t HcclAllReduce(void* /*send*/, void* /*recv*/, uint64_t /*count*/, int32_t /*dtype*/,
                                 int32_t /*op*/, HcclComm /*comm*/, AclStream /*stream*/) {
  return HCCL_E_NOT_SUPPORT;
}
ACLSIM_API int32_t HcclBroadcast(void* /*buf*/, uint64_t /*count*/, int32_t /*dtype*/, uint32_t /*root*/,
                                 HcclComm /*comm*/, AclStream /*stream*/) {
  return HCCL_E_NOT_SUPPORT;
}
ACLSIM_API int32_t HcclReduceScatter(void* /*send*/, void* /*recv*/, uint64_t /*count*/, int32_t /*dtype*/,
                                     int32_t /*op*/, HcclComm /*comm*/, AclStream /*stream*/) {
  return HCCL_E_NOT_SUPPORT;
}
ACLSIM_API int32_t HcclAllGather(void* /*send*/, void* /*recv*/, uint64_t /*count*/, int32_t /*dtype*/,
                                 HcclComm /*comm*/, AclStream /*stream*/) {
  return HCCL_E_NOT_SUPPORT;
}
ACLSIM_API int32_t HcclSend(void* /*send*/, uint64_t /*count*/, int32_t /*dtype*/, uint32_t /*dest_rank*/,
                            HcclComm /*comm*/, AclStream /*stream*/) {
  return HCCL_E_NOT_SUPPORT;
}
ACLSIM_API int32_t HcclRecv(void* /*recv*/, uint64_t /*count*/, int32_t /*dtype*/, uint32_t /*src_rank*/,
                            HcclComm /*comm*/, AclStream /*stream*/) {
  return HCCL_E_NOT_SUPPORT;
}

}  // extern "C"
