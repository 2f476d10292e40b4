// An interprocess event: an ACL event created with ACL_EVENT_IPC (or opened
// from another process's handle), ordered with torch_npu's task queue.
//
// Every operation first drains torch_npu's queue for the stream involved,
// then talks to ACL directly: a record therefore lands after everything the
// program launched on that stream before, and a wait before everything it
// launches after.
#pragma once

#include "acl_abi.h"
#include <c10/core/Device.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace torch_npu_ipc {

constexpr size_t kIpcEventHandleSize = sizeof(aclrtIpcEventHandle);  // 64

// Why interprocess events cannot work in this process ('' when they can):
// a function missing from libascendcl.so, or a trial ACL_EVENT_IPC event the
// runtime refuses (e.g. an NPU driver too old). Probed once, on `device`; the result is cached for the process.
const std::string& ipc_events_unsupported_reason(c10::DeviceIndex device);

class IpcEvent {
  struct Key {};

 public:
  // A new IPC event on `device` (aclrtCreateEventExWithFlag(ACL_EVENT_IPC)).
  static std::shared_ptr<IpcEvent> create(c10::DeviceIndex device);
  // The same, but nullptr when the device has no IPC event left, with the
  // reason and its fix in `*exhausted` (other failures raise).
  static std::shared_ptr<IpcEvent> try_create(c10::DeviceIndex device, std::string* exhausted);
  // Throws ValueError unless `device` is an NPU index this process sees.
  static void check_device(c10::DeviceIndex device);
  // Throws, naming the reason and its fix, unless this runtime and NPU have
  // IPC events (the functions, and a trial event: see
  // ipc_events_unsupported_reason).
  static void check_supported(c10::DeviceIndex device);
  // The event another process exported as `handle` (exactly 64 bytes),
  // opened on `device`.
  static std::shared_ptr<IpcEvent> open(c10::DeviceIndex device, const std::string& handle);

  IpcEvent(Key, aclrtEvent event, c10::DeviceIndex device, bool imported);
  ~IpcEvent();  // hands the ACL event to EventManager for deferred destruction
  IpcEvent(const IpcEvent&) = delete;
  IpcEvent& operator=(const IpcEvent&) = delete;

  void record(const c10_npu::NPUStream& stream);
  void wait(const c10_npu::NPUStream& stream);
  // True when never recorded, or the latest record ran.
  bool query() const;
  // Blocks the calling thread until the latest record ran.
  void synchronize() const;
  // The 64-byte handle another process passes to open().
  std::string handle();

  c10::DeviceIndex device() const { return device_; }
  aclrtEvent raw() const { return event_; }
  bool imported() const { return imported_; }
  bool exported() const;

 private:
  // The local fence recorded after each use of the event on `stream` (of
  // `device`, current), so the EventManager knows when that use drained
  // (CANN forbids aclrtQueryEventWaitStatus on IPC events). Created on the
  // first use, before the use is issued: when the device has no event left
  // it raises with nothing issued. nullptr when the runtime has no
  // aclrtCreateEventExWithFlag.
  aclrtEvent fence_for_locked(aclrtStream stream, c10::DeviceIndex device);
  // Destroys the fence of `stream`, made for a use that failed.
  void drop_fence_locked(aclrtStream stream);

  aclrtEvent event_;
  c10::DeviceIndex device_;
  bool imported_;
  mutable std::mutex mu_;
  std::string handle_;  // cached once exported
  std::unordered_map<aclrtStream, aclrtEvent> fences_;
};

}  // namespace torch_npu_ipc
