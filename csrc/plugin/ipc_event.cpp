#include "ipc_event.h"

#include <c10/util/Exception.h>

#include <cstring>

#include "acl_device_guard.h"
#include "acl_table.h"
#include "event_manager.h"
#include "npu_stream.h"
#include "torch_npu/csrc/core/npu/NPUFunctions.h"

namespace torch_npu_ipc {
namespace {

constexpr const char* kFeature = "Interprocess events";

// An event made by `create` with `flags` on the current device. When the
// device has no event left: nullptr, and the runtime's message in
// `*exhausted`. Any other failure raises.
aclrtEvent create_event(decltype(AclTable::CreateEventExWithFlag) create, uint32_t flags, const char* call,
                        std::string* exhausted) {
  aclrtEvent ev = nullptr;
  const aclError rc = create(&ev, flags);
  if (rc == ACL_ERROR_RT_NO_EVENT_RESOURCE) {
    *exhausted = acl_failure(call, rc);
    return nullptr;
  }
  check(rc, call);
  return ev;
}

std::string probe(c10::DeviceIndex device) {
  const AclTable& t = acl();
  const std::pair<const void*, const char*> needed[] = {
      {reinterpret_cast<const void*>(t.CreateEventExWithFlag), "aclrtCreateEventExWithFlag"},
      {reinterpret_cast<const void*>(t.IpcGetEventHandle), "aclrtIpcGetEventHandle"},
      {reinterpret_cast<const void*>(t.IpcOpenEventHandle), "aclrtIpcOpenEventHandle"},
      {reinterpret_cast<const void*>(t.RecordEvent), "aclrtRecordEvent"},
      {reinterpret_cast<const void*>(t.StreamWaitEvent), "aclrtStreamWaitEvent"},
      {reinterpret_cast<const void*>(t.DestroyEvent), "aclrtDestroyEvent"},
  };
  for (const auto& [fn, name] : needed) {
    if (fn == nullptr) {
      return std::string(name) +
             " is missing from libascendcl.so: upgrade the CANN toolkit (8.3 or newer) and the NPU driver "
             "(HDK 25.0 or newer)";
    }
  }
  AclDeviceGuard guard(device);
  aclrtEvent ev = nullptr;
  const aclError rc = t.CreateEventExWithFlag(&ev, ACL_EVENT_IPC);
  if (rc == ACL_SUCCESS) {
    (void)handled(t.DestroyEvent(ev));
    return std::string();
  }
  // CANN answers ACL_ERROR_RT_FEATURE_NOT_SUPPORT on a chip without IPC
  // events (RT_FEATURE_IPC_EVENT), and torch_npu's own support check reads
  // that code alone as "unsupported". Any other refusal is no verdict: a
  // device out of IPC events (CANN does not document that code) or a
  // transient failure; the creation that needs the event reports it, and
  // later ones try again.
  if (rc == ACL_ERROR_RT_FEATURE_NOT_SUPPORT && EventManager::get().stats().created == 0) {
    return "this NPU does not support interprocess events (" +
           acl_failure("aclrtCreateEventExWithFlag(ACL_EVENT_IPC)", rc) +
           "): they need an Atlas A2/A3-class NPU, CANN 8.3 or newer and NPU driver HDK 25.0 or newer";
  }
  (void)handled(rc);
  return std::string();
}

}  // namespace

const std::string& ipc_events_unsupported_reason(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::string* reason = nullptr;  // leaked: read by threads that may outlive static destruction
  std::call_once(once, [&] { reason = std::make_unique<std::string>(probe(device)).release(); });
  return *reason;
}

void IpcEvent::check_device(c10::DeviceIndex device) {
  const int visible = c10_npu::device_count();
  TORCH_CHECK_VALUE(device >= 0 && device < visible, "no NPU device ", int(device), " (", visible, " visible)");
}

void IpcEvent::check_supported(c10::DeviceIndex device) {
  NPU_IPC_ACL(CreateEventExWithFlag, kFeature);
  NPU_IPC_ACL(IpcGetEventHandle, kFeature);
  NPU_IPC_ACL(IpcOpenEventHandle, kFeature);
  const std::string& reason = ipc_events_unsupported_reason(device);
  TORCH_CHECK(reason.empty(), kFeature, ": not available here: ", reason);
}

std::shared_ptr<IpcEvent> IpcEvent::try_create(c10::DeviceIndex device, std::string* exhausted) {
  check_device(device);
  check_supported(device);
  auto create = acl().CreateEventExWithFlag;
  AclDeviceGuard guard(device);
  aclrtEvent ev = nullptr;
  aclError rc = create(&ev, ACL_EVENT_IPC);
  // Dropped events are destroyed when the next one is dropped, once their
  // uses ran and their export grace passed: some may be due by now.
  if (rc != ACL_SUCCESS && EventManager::get().collect() > 0) rc = create(&ev, ACL_EVENT_IPC);
  if (rc != ACL_SUCCESS) {
    const uint64_t kept = EventManager::get().stats().retired_pending;
    // CANN documents a limit (65,536 per device) but not the code that
    // reports it (its runtime takes no event id for an IPC event; aclsim
    // says ACL_ERROR_RT_NO_EVENT_RESOURCE). The probe passed, so the runtime
    // has IPC events: any refusal counts as none left for now, and callers
    // fall back for this use and try again later instead of giving up.
    *exhausted = acl_failure("aclrtCreateEventExWithFlag(ACL_EVENT_IPC)", rc) + "\nDevice " +
                 std::to_string(device) +
                 (rc == ACL_ERROR_RT_NO_EVENT_RESOURCE ? " has no IPC event left (the runtime's limit; "
                                                       : " refused a new IPC event: it may have no IPC event left (") +
                 "CANN's is 65,536 per device). Drop the interprocess Events you no longer need; each tensor sent "
                 "but not yet received holds one until it is received or TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S passes "
                 "(TORCH_NPU_IPC_MAX_INFLIGHT bounds how many)." +
                 (kept == 0 ? std::string()
                            : " " + std::to_string(kept) +
                                  " dropped interprocess Event(s) of this process still exist: their records or "
                                  "waits have not run yet, or their handle left this process less than "
                                  "TORCH_NPU_IPC_EXPORT_GRACE_MS (5000 ms by default) ago, so a receiver may "
                                  "still open it; they are destroyed after that.");
    return nullptr;
  }
  EventManager::get().note_created();
  return std::make_shared<IpcEvent>(Key{}, ev, device, /*imported=*/false);
}

std::shared_ptr<IpcEvent> IpcEvent::create(c10::DeviceIndex device) {
  std::string exhausted;
  auto ev = try_create(device, &exhausted);
  TORCH_CHECK(ev != nullptr, exhausted);
  return ev;
}

std::shared_ptr<IpcEvent> IpcEvent::open(c10::DeviceIndex device, const std::string& handle) {
  TORCH_CHECK_VALUE(handle.size() == kIpcEventHandleSize, "an IPC event handle has ", kIpcEventHandleSize,
                    " bytes, got ", handle.size());
  check_supported(device);
  auto open = acl().IpcOpenEventHandle;
  AclDeviceGuard guard(device);
  aclrtIpcEventHandle h{};
  std::memcpy(h.reserved, handle.data(), kIpcEventHandleSize);
  aclrtEvent ev = nullptr;
  const aclError rc = open(h, &ev);
  TORCH_CHECK(rc == ACL_SUCCESS, acl_failure("aclrtIpcOpenEventHandle", rc),
              "\nThe exporting process must keep its Event alive until every receiver opened the handle (an "
              "Event dropped after its handle left the process stays open for TORCH_NPU_IPC_EXPORT_GRACE_MS, "
              "5000 by default), and must still be running.");
  EventManager::get().note_created();
  auto e = std::make_shared<IpcEvent>(Key{}, ev, device, /*imported=*/true);
  e->handle_ = handle;
  return e;
}

IpcEvent::IpcEvent(Key, aclrtEvent event, c10::DeviceIndex device, bool imported)
    : event_(event), device_(device), imported_(imported) {}

IpcEvent::~IpcEvent() {
  try {
    std::vector<aclrtEvent> fences;
    fences.reserve(fences_.size());
    for (const auto& kv : fences_) fences.push_back(kv.second);
    // An imported event's handle did not leave this process because of us;
    // only events this process exported get the grace period.
    EventManager::get().retire(event_, device_, std::move(fences), !imported_ && !handle_.empty());
  } catch (...) {
    // Out of memory while retiring: leak the event rather than terminate.
  }
}

aclrtEvent IpcEvent::fence_for_locked(aclrtStream stream, c10::DeviceIndex device) {
  auto it = fences_.find(stream);
  if (it != fences_.end()) return it->second;
  auto create = acl().CreateEventExWithFlag;
  if (create == nullptr) return nullptr;
  std::string exhausted;
  aclrtEvent fence = create_event(create, ACL_EVENT_SYNC, "aclrtCreateEventExWithFlag(ACL_EVENT_SYNC)", &exhausted);
  TORCH_CHECK(fence != nullptr, exhausted, "\nnpu:", static_cast<int>(device),
              " has no event left for the fence that tells when this use of an interprocess event ran; nothing was "
              "issued (a tensor being received stays receivable). Destroy events you no longer need, then try again.");
  fences_.emplace(stream, fence);
  return fence;
}

// A fence made for a use that then failed is never recorded; kept, it would
// hold this event's retirement back on a runtime that reports a
// never-recorded event as not ready.
void IpcEvent::drop_fence_locked(aclrtStream stream) {
  auto it = fences_.find(stream);
  if (it == fences_.end()) return;
  if (auto destroy = acl().DestroyEvent; destroy != nullptr) (void)handled(destroy(it->second));
  fences_.erase(it);
}

void IpcEvent::record(const c10_npu::NPUStream& stream) {
  TORCH_CHECK_VALUE(stream.device_index() == device_, "this interprocess event belongs to npu:", int(device_),
                    " and cannot be recorded on a stream of npu:", int(stream.device_index()),
                    "; record it on a stream of npu:", int(device_), " (waiting works from any device)");
  auto record = NPU_IPC_ACL(RecordEvent, kFeature);
  AclDeviceGuard guard(device_);
  aclrtStream raw = drained(stream);
  TORCH_CHECK(raw != nullptr, "torch_npu failed to flush its task queue for npu:", int(stream.device_index()));
  std::lock_guard<std::mutex> lock(mu_);
  const bool fresh = fences_.count(raw) == 0;
  aclrtEvent fence = fence_for_locked(raw, device_);
  const aclError rc = record(event_, raw);
  if (rc != ACL_SUCCESS && fresh) drop_fence_locked(raw);
  check(rc, "aclrtRecordEvent");
  if (fence != nullptr) check(record(fence, raw), "aclrtRecordEvent(fence)");
}

void IpcEvent::wait(const c10_npu::NPUStream& stream) {
  auto wait = NPU_IPC_ACL(StreamWaitEvent, kFeature);
  auto record = NPU_IPC_ACL(RecordEvent, kFeature);
  AclDeviceGuard guard(stream.device_index());
  aclrtStream raw = drained(stream);
  TORCH_CHECK(raw != nullptr, "torch_npu failed to flush its task queue for npu:", int(stream.device_index()));
  std::lock_guard<std::mutex> lock(mu_);
  const bool fresh = fences_.count(raw) == 0;
  aclrtEvent fence = fence_for_locked(raw, stream.device_index());
  const aclError rc = wait(raw, event_);
  if (rc != ACL_SUCCESS && fresh) drop_fence_locked(raw);
  check(rc, "aclrtStreamWaitEvent");
  if (fence != nullptr) check(record(fence, raw), "aclrtRecordEvent(fence)");
}

bool IpcEvent::query() const {
  auto query = NPU_IPC_ACL(QueryEventStatus, kFeature);
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  check(query(event_, &status), "aclrtQueryEventStatus");
  return status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
}

void IpcEvent::synchronize() const {
  auto sync = NPU_IPC_ACL(SynchronizeEvent, kFeature);
  check(sync(event_), "aclrtSynchronizeEvent");
}

std::string IpcEvent::handle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (handle_.empty()) {
    auto get = NPU_IPC_ACL(IpcGetEventHandle, kFeature);
    aclrtIpcEventHandle h{};
    check(get(event_, &h), "aclrtIpcGetEventHandle");
    handle_.assign(h.reserved, kIpcEventHandleSize);
  }
  return handle_;
}

bool IpcEvent::exported() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !imported_ && !handle_.empty();
}

}  // namespace torch_npu_ipc
