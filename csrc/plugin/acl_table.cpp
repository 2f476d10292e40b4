#include "acl_table.h"

#include <dlfcn.h>

#include <c10/util/Exception.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <unordered_set>

namespace torch_npu_ipc {
namespace {

void* library() {
  // torch_npu links libascendcl.so, so it is loaded: RTLD_NOLOAD finds it
  // without loading a second copy from elsewhere.
  static void* handle = [] {
    void* h = dlopen("libascendcl.so", RTLD_NOW | RTLD_NOLOAD);
    return h != nullptr ? h : dlopen("libascendcl.so", RTLD_NOW | RTLD_GLOBAL);
  }();
  return handle;
}

// TORCH_NPU_IPC_ACL_HIDE=name,name,...: treat these functions as missing,
// to see how the plugin behaves on an older CANN (each feature reports
// itself unsupported, naming the function). A diagnostic, read once.
const std::unordered_set<std::string>& hidden() {
  static const std::unordered_set<std::string> names = [] {
    std::unordered_set<std::string> out;
    const char* env = std::getenv("TORCH_NPU_IPC_ACL_HIDE");
    std::stringstream list(env != nullptr ? env : "");
    for (std::string name; std::getline(list, name, ',');) {
      if (!name.empty()) out.insert(name);
    }
    return out;
  }();
  return names;
}

template <class F>
void resolve(F& slot, const char* name) {
  void* lib = library();
  slot = lib == nullptr || hidden_by_env(name) ? nullptr : reinterpret_cast<F>(dlsym(lib, name));
}

AclTable load() {
  AclTable t;
  resolve(t.CreateEventExWithFlag, "aclrtCreateEventExWithFlag");
  resolve(t.DestroyEvent, "aclrtDestroyEvent");
  resolve(t.RecordEvent, "aclrtRecordEvent");
  resolve(t.StreamWaitEvent, "aclrtStreamWaitEvent");
  resolve(t.QueryEventStatus, "aclrtQueryEventStatus");
  resolve(t.SynchronizeEvent, "aclrtSynchronizeEvent");
  resolve(t.SynchronizeStream, "aclrtSynchronizeStream");
  resolve(t.SynchronizeDevice, "aclrtSynchronizeDevice");
  resolve(t.StreamQuery, "aclrtStreamQuery");
  resolve(t.GetDevice, "aclrtGetDevice");
  resolve(t.SetDevice, "aclrtSetDevice");
  resolve(t.GetDeviceCount, "aclrtGetDeviceCount");
  resolve(t.GetPrimaryCtxState, "aclrtGetPrimaryCtxState");
  resolve(t.GetMemInfo, "aclrtGetMemInfo");
  resolve(t.IpcGetEventHandle, "aclrtIpcGetEventHandle");
  resolve(t.IpcOpenEventHandle, "aclrtIpcOpenEventHandle");
  resolve(t.IpcMemGetExportKey, "aclrtIpcMemGetExportKey");
  resolve(t.IpcMemImportByKey, "aclrtIpcMemImportByKey");
  resolve(t.IpcMemClose, "aclrtIpcMemClose");
  resolve(t.DeviceCanAccessPeer, "aclrtDeviceCanAccessPeer");
  resolve(t.DeviceEnablePeerAccess, "aclrtDeviceEnablePeerAccess");
  resolve(t.MemcpyAsync, "aclrtMemcpyAsync");
  resolve(t.GetRecentErrMsg, "aclGetRecentErrMsg");
  return t;
}

}  // namespace

bool hidden_by_env(const std::string& name) { return hidden().count(name) != 0; }

const AclTable& acl() {
  static const AclTable table = load();
  return table;
}

std::string acl_library_path() {
  void* fn = reinterpret_cast<void*>(acl().DestroyEvent);
  Dl_info info{};
  if (fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fname != nullptr) return info.dli_fname;
  return "libascendcl.so (not found)";
}

void require(const void* fn, const char* name, const char* feature) {
  TORCH_CHECK(fn != nullptr, feature, ": not supported by this CANN runtime (", name,
              " is missing from libascendcl.so). Upgrade the CANN toolkit (8.3 or newer) and the "
              "NPU driver (HDK 25.0 or newer) to use it.");
}

std::string acl_failure(const char* call, aclError rc) {
  const char* msg = acl().GetRecentErrMsg != nullptr ? acl().GetRecentErrMsg() : nullptr;
  std::string out = std::string(call) + " failed with ACL error " + std::to_string(rc);
  if (msg != nullptr && *msg != '\0') out += std::string(": ") + msg;
  return out;
}

aclError handled(aclError rc) {
  if (rc != ACL_SUCCESS && acl().GetRecentErrMsg != nullptr) (void)acl().GetRecentErrMsg();
  return rc;
}

void check(aclError rc, const char* call) {
  if (rc == ACL_SUCCESS) return;
  TORCH_CHECK(false, acl_failure(call, rc));
}

}  // namespace torch_npu_ipc
