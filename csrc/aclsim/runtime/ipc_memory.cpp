// IPC memory: aclrtIpcMemGetExportKey / SetImportPid / ImportByKey / Close.
//
// A key names an export in the exporting process's broker (broker.h). The
// importer receives the allocation's memfd and maps the exported range, so
// both processes address the same bytes.
//
// As CANN's runtime does (IpcOpenMemory / IpcCloseMemoryByName in the open
// source hicann/runtime): a process keeps, per key, the list of its imports
// in import order. Every import maps the memory anew, on the current device,
// and appends; aclrtIpcMemClose(key) unmaps the OLDEST import of that key,
// whichever device made it, and only when the process holds no import of
// the key does it retract the process's own export of it.
#include <unistd.h>

#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "broker.h"
#include "device.h"
#include "memory.h"
#include "no_destructor.h"

using namespace aclsim;

namespace {

constexpr size_t kKeyLen = 65;

struct IpcMemState {
  std::mutex mu;
  std::map<std::string, broker::Ticket> exports;  // key -> ticket, exporter side
  std::map<std::string, std::deque<void*>> imports;  // key -> mappings, oldest first (importer side)
};

IpcMemState& state() {
  static NoDestructor<IpcMemState> s;
  return *s;
}

}  // namespace

extern "C" {

ACLSIM_API aclError aclrtIpcMemGetExportKey(void* devPtr, size_t size, char* key, size_t len, uint64_t flags) {
  if (key == nullptr || len < kKeyLen) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcMemGetExportKey: key buffer must hold 65 bytes");
  }
  if ((flags & ~ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION) != 0) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcMemGetExportKey: unknown flag bits");
  }
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcMemGetExportKey: size is 0");
  if (reinterpret_cast<uintptr_t>(devPtr) % page_size() != 0) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcMemGetExportKey: devPtr must be page aligned (" +
                                             std::to_string(page_size()) + " bytes)");
  }
  auto a = find_allocation(devPtr, size);
  if (a == nullptr || a->kind() != MemKind::Device) {
    return fail(ACL_ERROR_RT_PARAM_INVALID,
                "aclrtIpcMemGetExportKey: [devPtr, devPtr + size) is not inside one device allocation of this process");
  }
  broker::Export ex;
  ex.kind = broker::Kind::Memory;
  ex.owner = a;
  ex.fd = a->fd();
  ex.offset = reinterpret_cast<uintptr_t>(devPtr) - a->base();
  ex.size = (size + page_size() - 1) / page_size() * page_size();
  if (ex.offset + ex.size > a->size()) ex.size = a->size() - ex.offset;
  ex.device = a->device();
  ex.check_pid = (flags & ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION) == 0;
  broker::Ticket t;
  if (aclError rc = broker::publish(std::move(ex), &t); rc != ACL_SUCCESS) return rc;
  std::string text = broker::format_ticket(broker::Kind::Memory, t);
  std::memset(key, 0, kKeyLen);
  std::memcpy(key, text.data(), text.size());
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().exports[text] = t;
  }
  count(Counter::IpcMemExport);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtIpcMemSetImportPid(const char* key, int32_t* pid, size_t num) {
  if (key == nullptr || (pid == nullptr && num != 0)) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcMemSetImportPid: null argument");
  }
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().exports.find(std::string(key, strnlen(key, kKeyLen)));
  if (it == state().exports.end()) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtIpcMemSetImportPid: key was not exported by this process");
  }
  return broker::allow_pids(it->second, pid, num);
}

ACLSIM_API aclError aclrtIpcMemImportByKey(void** devPtr, const char* key, uint64_t flags) {
  if (devPtr == nullptr || key == nullptr) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcMemImportByKey: null argument");
  }
  if ((flags & ~ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS) != 0) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcMemImportByKey: unknown flag bits");
  }
  broker::Ticket t;
  if (!broker::parse_ticket(broker::Kind::Memory, key, kKeyLen, &t)) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtIpcMemImportByKey: not a valid IPC memory key");
  }
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  const std::string name(key, strnlen(key, kKeyLen));
  std::lock_guard<std::mutex> lock(state().mu);
  broker::Grant g;
  if (aclError rc = broker::request(broker::Kind::Memory, t, &g); rc != ACL_SUCCESS) return rc;
  if (g.device != dev && (flags & ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS) == 0) {
    close(g.fd);
    return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                "aclrtIpcMemImportByKey: memory of device " + std::to_string(g.device) + " imported on device " +
                    std::to_string(dev) + " needs ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS");
  }
  aclError rc = ACL_SUCCESS;
  void* p = map_imported(g.fd, g.offset, g.size, dev, &rc);
  if (p == nullptr) return rc;
  state().imports[name].push_back(p);
  count(Counter::IpcMemImport);
  *devPtr = p;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtIpcMemClose(const char* key) {
  if (key == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcMemClose: null key");
  const std::string name(key, strnlen(key, kKeyLen));
  std::lock_guard<std::mutex> lock(state().mu);
  if (auto it = state().imports.find(name); it != state().imports.end()) {
    unmap_imported(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) state().imports.erase(it);
    count(Counter::IpcMemClose);
    return ACL_SUCCESS;
  }
  if (auto it = state().exports.find(name); it != state().exports.end()) {
    broker::retract(it->second);
    state().exports.erase(it);
    count(Counter::IpcMemClose);
    return ACL_SUCCESS;
  }
  return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtIpcMemClose: key is neither exported nor imported by this process");
}

}  // extern "C"
