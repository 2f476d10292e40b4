// The one table of ACL runtime functions the plugin calls.
//
// Every entry is resolved at run time with dlsym from libascendcl.so, which
// torch_npu has already loaded: the same binary runs on real CANN and on
// aclsim, and on a CANN too old for a feature only that feature reports
// itself unsupported. No torch_npu private symbol is used.
#pragma once

#include "acl_abi.h"

#include <string>

namespace torch_npu_ipc {

struct AclTable {
  // Events and streams.
  aclError (*CreateEventExWithFlag)(aclrtEvent*, uint32_t) = nullptr;
  aclError (*DestroyEvent)(aclrtEvent) = nullptr;
  aclError (*RecordEvent)(aclrtEvent, aclrtStream) = nullptr;
  aclError (*StreamWaitEvent)(aclrtStream, aclrtEvent) = nullptr;
  aclError (*QueryEventStatus)(aclrtEvent, aclrtEventRecordedStatus*) = nullptr;
  aclError (*SynchronizeEvent)(aclrtEvent) = nullptr;
  aclError (*SynchronizeStream)(aclrtStream) = nullptr;
  aclError (*SynchronizeDevice)() = nullptr;
  aclError (*StreamQuery)(aclrtStream, aclrtStreamStatus*) = nullptr;
  aclError (*GetDevice)(int32_t*) = nullptr;
  aclError (*SetDevice)(int32_t) = nullptr;
  aclError (*GetDeviceCount)(uint32_t*) = nullptr;
  aclError (*GetPrimaryCtxState)(int32_t, uint32_t*, int32_t*) = nullptr;
  aclError (*GetMemInfo)(aclrtMemAttr, size_t*, size_t*) = nullptr;
  // IPC events.
  aclError (*IpcGetEventHandle)(aclrtEvent, aclrtIpcEventHandle*) = nullptr;
  aclError (*IpcOpenEventHandle)(aclrtIpcEventHandle, aclrtEvent*) = nullptr;
  // IPC memory.
  aclError (*IpcMemGetExportKey)(void*, size_t, char*, size_t, uint64_t) = nullptr;
  aclError (*IpcMemImportByKey)(void**, const char*, uint64_t) = nullptr;
  aclError (*IpcMemClose)(const char*) = nullptr;
  // Peer access and copies.
  aclError (*DeviceCanAccessPeer)(int32_t*, int32_t, int32_t) = nullptr;
  aclError (*DeviceEnablePeerAccess)(int32_t, uint32_t) = nullptr;
  aclError (*MemcpyAsync)(void*, size_t, const void*, size_t, aclrtMemcpyKind, aclrtStream) = nullptr;
  // Diagnostics.
  const char* (*GetRecentErrMsg)() = nullptr;
};

// The process-wide table (resolved on first use; thread-safe).
const AclTable& acl();

// True when TORCH_NPU_IPC_ACL_HIDE (a comma-separated list) names `name`:
// the plugin then treats that entry point as missing, as on an older CANN or
// torch_npu. A diagnostic for tests and support; read once per process.
bool hidden_by_env(const std::string& name);

// Where the table was resolved from (path of libascendcl.so), for doctor.
std::string acl_library_path();

// Throws c10::Error (RuntimeError in Python) naming `name` and the CANN /
// driver upgrade needed when `fn` is missing from this runtime.
void require(const void* fn, const char* name, const char* feature);

// The message for a failed ACL call: the call, the code and the runtime's
// own message (aclGetRecentErrMsg, where the runtime has it).
std::string acl_failure(const char* call, aclError rc);

// Throws RuntimeError with acl_failure()'s message unless rc is ACL_SUCCESS.
void check(aclError rc, const char* call);

// For a failure the caller handles itself (a probe, "no current device yet"):
// reads and drops the runtime's message, so it does not pile onto the next
// error torch_npu or the user reads (CANN's aclGetRecentErrMsg returns every
// message not read yet). Returns rc.
aclError handled(aclError rc);

}  // namespace torch_npu_ipc

#define NPU_IPC_ACL(fn, feature) \
  (::torch_npu_ipc::require(reinterpret_cast<const void*>(::torch_npu_ipc::acl().fn), "aclrt" #fn, feature), \
   ::torch_npu_ipc::acl().fn)
