// ACL event calls, local and IPC. The ordering logic lives in EventCore;
// this file validates arguments, applies CANN's rules about which calls an
// IPC event allows, and hands IPC events to other processes via the broker.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include "broker.h"
#include "config.h"
#include "device.h"
#include "event_core.h"
#include "handles.h"
#include "no_destructor.h"
#include "stream.h"

using namespace aclsim;

namespace {

// CANN's runtime bit with no ACL name (RT_EVENT_DDSYNC): like ACL_EVENT_SYNC,
// it gives the event a wait task. torch_npu's ACL_EVENT_DEFAULT (0xE) has it.
constexpr uint32_t kDdsync = 0x4U;

// The flags each creation call accepts, as CANN's runtime checks them
// (ApiErrorDecorator::EventCreate / EventCreateEx in hicann/runtime): at
// least one bit of the call's mask and no bit outside it, and the "sole"
// flags only alone. The classic call takes neither ACL_EVENT_IPC nor 0; the
// Ex call takes neither ACL_EVENT_DEVICE_USE_ONLY nor ACL_EVENT_EXTERNAL.
constexpr uint32_t kClassicFlags = ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | kDdsync | ACL_EVENT_TIME_LINE |
                                   ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_EXTERNAL;
constexpr uint32_t kExFlags = ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | kDdsync | ACL_EVENT_TIME_LINE |
                              ACL_EVENT_IPC;
constexpr uint32_t kSoleFlags[] = {ACL_EVENT_DEVICE_USE_ONLY, ACL_EVENT_EXTERNAL, ACL_EVENT_IPC};

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%x", v);
  return buf;
}

// Why CANN refuses `flags` for the classic (`new_mode` false) or the Ex
// call; empty when it accepts them.
std::string bad_flags(uint32_t flags, bool new_mode) {
  for (uint32_t sole : kSoleFlags) {
    if ((flags & sole) != 0 && flags != sole) {
      return "flag " + hex(sole) + " cannot be combined with other flags";
    }
  }
  const uint32_t mask = new_mode ? kExFlags : kClassicFlags;
  if ((flags & mask) == 0 || (flags & ~mask) != 0) {
    return "flags " + hex(flags) + " are refused: they need at least one bit of " + hex(mask) + " and no other" +
           (new_mode ? "" : " (ACL_EVENT_IPC needs aclrtCreateEventExWithFlag)");
  }
  return "";
}

struct Event {
  uint32_t flags = 0;
  std::shared_ptr<EventCore> core;
  bool imported = false;
  // Created by aclrtCreateEventExWithFlag: CANN's "new mode" event, which
  // does not track its wait tasks (no aclrtQueryEventWaitStatus).
  bool new_mode = false;
  int device = -1;
  std::mutex mu;             // guards the fields below
  bool exported = false;
  broker::Ticket ticket{};
  bool is_ipc() const { return (flags & ACL_EVENT_IPC) != 0; }
};

// Events alive per device against a limit: CANN's for IPC events
// (config().max_ipc_events), the simulator's knob for the others
// (config().max_events). Opened IPC handles count in neither.
class EventBudget {
 public:
  explicit EventBudget(int Config::*limit) : limit_(limit) {}
  int limit() const { return config().*limit_; }
  bool take(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_[device] >= limit()) return false;
    ++live_[device];
    return true;
  }
  void give_back(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    --live_[device];
  }

 private:
  int Config::*limit_;
  std::mutex mu_;
  int live_[kMaxDevices] = {};
};

// The budget an event created with `is_ipc` draws from.
EventBudget& budget(bool is_ipc) {
  static NoDestructor<EventBudget> ipc(&Config::max_ipc_events);
  static NoDestructor<EventBudget> local(&Config::max_events);
  return is_ipc ? *ipc : *local;
}

HandleTable<Event>& events() {
  static NoDestructor<HandleTable<Event>> table(uintptr_t{0x5E0000000000});
  return *table;
}

std::shared_ptr<Event> lookup(aclrtEvent handle, const char* call, aclError* err) {
  auto e = events().get(handle);
  *err = e == nullptr ? fail(ACL_ERROR_RT_PARAM_INVALID, std::string(call) + ": invalid event handle") : ACL_SUCCESS;
  return e;
}

aclError forbid_ipc(const Event& e, const char* call) {
  if (!e.is_ipc()) return ACL_SUCCESS;
  return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, std::string(call) + " is not supported on an IPC event");
}

// As CANN's runtime: an ACL_EVENT_EXTERNAL event cannot be synchronized,
// queried or timed.
aclError forbid_external(const Event& e, const char* call) {
  if (e.flags != ACL_EVENT_EXTERNAL) return ACL_SUCCESS;
  return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, std::string(call) + " is not supported on an ACL_EVENT_EXTERNAL event");
}

// As CANN's runtime: an ACL_EVENT_DEVICE_USE_ONLY event (its RT_EVENT_MC2,
// for collective kernels) is neither recorded, waited on nor reset by a
// stream.
aclError forbid_device_use_only(const Event& e, const char* call) {
  if ((e.flags & ACL_EVENT_DEVICE_USE_ONLY) == 0) return ACL_SUCCESS;
  return fail(ACL_ERROR_RT_PARAM_INVALID,
              std::string(call) + " is not supported on an ACL_EVENT_DEVICE_USE_ONLY event");
}

// As CANN's runtime (Event::IsEventWithoutWaitTask in hicann/runtime): an
// event with none of the ACL_EVENT_SYNC, DDSYNC, EXTERNAL or IPC bits, e.g.
// ACL_EVENT_TIME_LINE alone, has no wait task: it cannot be waited on or
// reset.
aclError forbid_without_wait_task(const Event& e, const char* call) {
  if ((e.flags & (ACL_EVENT_SYNC | kDdsync | ACL_EVENT_EXTERNAL | ACL_EVENT_IPC)) != 0) return ACL_SUCCESS;
  return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, std::string(call) + ": an event created with flags " +
                                                    std::to_string(e.flags) +
                                                    " has no wait task (it needs ACL_EVENT_SYNC)");
}

// As CANN's runtime (ApiImpl::EventReset, ApiImplEvent::EventQuery in
// hicann/runtime): refused on every event aclrtCreateEventExWithFlag made.
aclError forbid_new_mode(const Event& e, const char* call) {
  if (!e.new_mode) return ACL_SUCCESS;
  return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
              std::string(call) + " is not supported on an event created by aclrtCreateEventExWithFlag");
}

// ACLSIM_IPC_EVENTS=0: a chip without IPC events. As CANN's runtime
// (rtIpcGetEventHandle, ApiErrorDecorator::EventCreateEx in
// hicann/runtime), each IPC event call then answers "not supported", before
// looking at its arguments.
aclError forbid_ipc_on_this_chip(const char* call) {
  if (config().ipc_events) return ACL_SUCCESS;
  return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
              std::string(call) + ": this chip does not support IPC events (ACLSIM_IPC_EVENTS=0)");
}

// ACLSIM_TRACE_EVENTS=1: one line per event call on stderr, to see which
// thread issues what, in which order (status: a query's answer or a create's
// flags, else -1).
aclError traced(const char* call, const void* event, const void* stream, aclError rc, int status = -1) {
  if (!config().trace_events) return rc;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  char line[256];
  int n = std::snprintf(line, sizeof(line),
                        "aclsim-trace %ld.%09ld tid=%ld dev=%d %s event=%p stream=%p rc=%d status=%d\n",
                        static_cast<long>(ts.tv_sec), static_cast<long>(ts.tv_nsec),
                        static_cast<long>(syscall(SYS_gettid)), current_device(), call, event, stream,
                        static_cast<int>(rc), status);
  if (n > 0) (void)!write(2, line, static_cast<size_t>(std::min<int>(n, sizeof(line) - 1)));
  return rc;
}

aclError create_event(aclrtEvent* out, uint32_t flags, bool new_mode) {
  if (out == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "create event: null output");
  const char* call = new_mode ? "aclrtCreateEventExWithFlag" : "aclrtCreateEventWithFlag";
  if (std::string why = bad_flags(flags, new_mode); !why.empty()) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, std::string(call) + ": " + why);
  }
  if (flags == ACL_EVENT_IPC) {
    if (aclError rc = forbid_ipc_on_this_chip(call); rc != ACL_SUCCESS) return rc;
  }
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  auto e = std::make_shared<Event>();
  e->flags = flags;
  e->new_mode = new_mode;
  e->device = dev;
  EventBudget& b = budget(e->is_ipc());
  if (!b.take(dev)) {
    return fail(config().event_limit_error, "create event: device " + std::to_string(dev) + " already has " +
                                                std::to_string(b.limit()) + (e->is_ipc() ? " IPC events" : " events"));
  }
  aclError rc = ACL_SUCCESS;
  e->core = e->is_ipc() ? EventCore::create_shared(dev, &rc) : EventCore::create_local(dev);
  if (e->core == nullptr) {
    b.give_back(dev);
    return rc != ACL_SUCCESS ? rc : fail(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, "create event failed");
  }
  count(Counter::CreateEvent);
  if (e->is_ipc()) count(Counter::IpcEventCreate);
  *out = events().add(std::move(e));
  return ACL_SUCCESS;
}

aclError destroy_event(aclrtEvent event) {
  auto e = events().remove(event);
  if (e == nullptr) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDestroyEvent: invalid event handle");
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->exported) broker::retract(e->ticket);  // later opens of the handle fail
  }
  count(Counter::DestroyEvent);
  if (e->is_ipc()) count(Counter::IpcEventDestroy);
  if (!e->imported) budget(e->is_ipc()).give_back(e->device);
  // As on CANN, the handle is dead at once (any later call naming it fails:
  // CANN clears the handle's magic before deferring the release), while the
  // records/waits already issued keep the table alive until they ran.
  return ACL_SUCCESS;
}

aclError record_event(aclrtEvent event, aclrtStream stream) {
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtRecordEvent", &err);
  if (e == nullptr) return err;
  if ((err = forbid_device_use_only(*e, "aclrtRecordEvent")) != ACL_SUCCESS) return err;
  auto s = resolve_work_stream(stream, "aclrtRecordEvent", &err);
  if (s == nullptr) return err;
  count(Counter::RecordEvent);
  return e->core->record(*s);
}

aclError stream_wait_event(aclrtStream stream, aclrtEvent event) {
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtStreamWaitEvent", &err);
  if (e == nullptr) return err;
  // As CANN's runtime (ApiErrorDecorator::StreamWaitEvent).
  if ((err = forbid_device_use_only(*e, "aclrtStreamWaitEvent")) != ACL_SUCCESS) return err;
  if ((err = forbid_without_wait_task(*e, "aclrtStreamWaitEvent")) != ACL_SUCCESS) return err;
  auto s = resolve_work_stream(stream, "aclrtStreamWaitEvent", &err);
  if (s == nullptr) return err;
  count(Counter::StreamWaitEvent);
  return e->core->wait(*s);
}

aclError query_event_status(aclrtEvent event, aclrtEventRecordedStatus* status) {
  if (status == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtQueryEventStatus: null output");
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtQueryEventStatus", &err);
  if (e == nullptr) return err;
  if ((err = forbid_external(*e, "aclrtQueryEventStatus")) != ACL_SUCCESS) return err;
  count(Counter::QueryEvent);
  bool complete = false;
  if ((err = e->core->query(&complete)) != ACL_SUCCESS) return err;
  *status = complete ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

aclError query_event(aclrtEvent event, aclrtEventStatus* status) {
  if (status == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtQueryEvent: null output");
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtQueryEvent", &err);
  if (e == nullptr) return err;
  if ((err = forbid_ipc(*e, "aclrtQueryEvent")) != ACL_SUCCESS) return err;
  if ((err = forbid_new_mode(*e, "aclrtQueryEvent")) != ACL_SUCCESS) return err;
  if ((err = forbid_external(*e, "aclrtQueryEvent")) != ACL_SUCCESS) return err;
  bool complete = false;
  if ((err = e->core->query(&complete)) != ACL_SUCCESS) return err;
  *status = complete ? ACL_EVENT_STATUS_COMPLETE : ACL_EVENT_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

aclError query_event_wait_status(aclrtEvent event, aclrtEventWaitStatus* status) {
  if (status == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtQueryEventWaitStatus: null output");
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtQueryEventWaitStatus", &err);
  if (e == nullptr) return err;
  if ((err = forbid_ipc(*e, "aclrtQueryEventWaitStatus")) != ACL_SUCCESS) return err;
  if ((err = forbid_new_mode(*e, "aclrtQueryEventWaitStatus")) != ACL_SUCCESS) return err;
  if ((err = forbid_external(*e, "aclrtQueryEventWaitStatus")) != ACL_SUCCESS) return err;
  // As CANN: about the wait tasks issued on the event, not its record. With
  // no wait issued (yet), or all of them finished, the answer is COMPLETE.
  *status = e->core->waits_pending() ? ACL_EVENT_WAIT_STATUS_NOT_READY : ACL_EVENT_WAIT_STATUS_COMPLETE;
  return ACL_SUCCESS;
}

aclError synchronize_event(aclrtEvent event) {
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtSynchronizeEvent", &err);
  if (e == nullptr) return err;
  if ((err = forbid_external(*e, "aclrtSynchronizeEvent")) != ACL_SUCCESS) return err;
  count(Counter::SynchronizeEvent);
  return e->core->synchronize(-1);
}

aclError synchronize_event_with_timeout(aclrtEvent event, int32_t timeout) {
  aclError err = check_sync_timeout(timeout, "aclrtSynchronizeEventWithTimeout");
  if (err != ACL_SUCCESS) return err;
  auto e = lookup(event, "aclrtSynchronizeEventWithTimeout", &err);
  if (e == nullptr) return err;
  if ((err = forbid_external(*e, "aclrtSynchronizeEventWithTimeout")) != ACL_SUCCESS) return err;
  count(Counter::SynchronizeEvent);
  return e->core->synchronize(timeout);
}

}  // namespace

extern "C" {

ACLSIM_API aclError aclrtCreateEvent(aclrtEvent* event) {
  aclError rc = create_event(event, ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE, false);
  return traced("aclrtCreateEvent", rc == ACL_SUCCESS ? *event : nullptr, nullptr, rc);
}

ACLSIM_API aclError aclrtCreateEventWithFlag(aclrtEvent* event, uint32_t flag) {
  aclError rc = create_event(event, flag, false);
  return traced("aclrtCreateEventWithFlag", rc == ACL_SUCCESS ? *event : nullptr, nullptr, rc, static_cast<int>(flag));
}

ACLSIM_API aclError aclrtCreateEventExWithFlag(aclrtEvent* event, uint32_t flag) {
  aclError rc = create_event(event, flag, true);
  return traced("aclrtCreateEventExWithFlag", rc == ACL_SUCCESS ? *event : nullptr, nullptr, rc,
                static_cast<int>(flag));
}

ACLSIM_API aclError aclrtDestroyEvent(aclrtEvent event) {
  return traced("aclrtDestroyEvent", event, nullptr, destroy_event(event));
}

ACLSIM_API aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  return traced("aclrtRecordEvent", event, stream, record_event(event, stream));
}

ACLSIM_API aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
  return traced("aclrtStreamWaitEvent", event, stream, stream_wait_event(stream, event));
}

ACLSIM_API aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream) {
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtResetEvent", &err);
  if (e == nullptr) return err;
  if ((err = forbid_ipc(*e, "aclrtResetEvent")) != ACL_SUCCESS) return err;
  if ((err = forbid_new_mode(*e, "aclrtResetEvent")) != ACL_SUCCESS) return err;
  if ((err = forbid_device_use_only(*e, "aclrtResetEvent")) != ACL_SUCCESS) return err;
  if ((err = forbid_without_wait_task(*e, "aclrtResetEvent")) != ACL_SUCCESS) return err;
  auto s = resolve_work_stream(stream, "aclrtResetEvent", &err);
  if (s == nullptr) return err;
  return e->core->reset(*s);
}

ACLSIM_API aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus* status) {
  aclError rc = query_event_status(event, status);
  return traced("aclrtQueryEventStatus", event, nullptr, rc, rc == ACL_SUCCESS ? static_cast<int>(*status) : -1);
}

ACLSIM_API aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus* status) {
  aclError rc = query_event(event, status);
  return traced("aclrtQueryEvent", event, nullptr, rc, rc == ACL_SUCCESS ? static_cast<int>(*status) : -1);
}

ACLSIM_API aclError aclrtQueryEventWaitStatus(aclrtEvent event, aclrtEventWaitStatus* status) {
  aclError rc = query_event_wait_status(event, status);
  return traced("aclrtQueryEventWaitStatus", event, nullptr, rc, rc == ACL_SUCCESS ? static_cast<int>(*status) : -1);
}

ACLSIM_API aclError aclrtSynchronizeEvent(aclrtEvent event) {
  return traced("aclrtSynchronizeEvent", event, nullptr, synchronize_event(event));
}

ACLSIM_API aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout) {
  return traced("aclrtSynchronizeEventWithTimeout", event, nullptr, synchronize_event_with_timeout(event, timeout));
}

ACLSIM_API aclError aclrtEventElapsedTime(float* ms, aclrtEvent startEvent, aclrtEvent endEvent) {
  if (ms == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtEventElapsedTime: null output");
  aclError err = ACL_SUCCESS;
  auto a = lookup(startEvent, "aclrtEventElapsedTime", &err);
  if (a == nullptr) return err;
  auto b = lookup(endEvent, "aclrtEventElapsedTime", &err);
  if (b == nullptr) return err;
  if ((err = forbid_ipc(*a, "aclrtEventElapsedTime")) != ACL_SUCCESS) return err;
  if ((err = forbid_ipc(*b, "aclrtEventElapsedTime")) != ACL_SUCCESS) return err;
  if ((err = forbid_external(*a, "aclrtEventElapsedTime")) != ACL_SUCCESS) return err;
  if ((err = forbid_external(*b, "aclrtEventElapsedTime")) != ACL_SUCCESS) return err;
  uint64_t t0 = 0, t1 = 0;
  if ((err = a->core->timestamp(&t0)) != ACL_SUCCESS) return err;
  if ((err = b->core->timestamp(&t1)) != ACL_SUCCESS) return err;
  *ms = static_cast<float>((static_cast<double>(t1) - static_cast<double>(t0)) / 1e6);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtEventGetTimestamp(aclrtEvent event, uint64_t* timestamp) {
  if (timestamp == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtEventGetTimestamp: null output");
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtEventGetTimestamp", &err);
  if (e == nullptr) return err;
  if ((err = forbid_ipc(*e, "aclrtEventGetTimestamp")) != ACL_SUCCESS) return err;
  if ((err = forbid_external(*e, "aclrtEventGetTimestamp")) != ACL_SUCCESS) return err;
  uint64_t ns = 0;
  if ((err = e->core->timestamp(&ns)) != ACL_SUCCESS) return err;
  *timestamp = ns / 1000;  // microseconds
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtGetEventId(aclrtEvent event, uint32_t* eventId) {
  if (eventId == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetEventId: null output");
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtGetEventId", &err);
  if (e == nullptr) return err;
  if ((err = forbid_ipc(*e, "aclrtGetEventId")) != ACL_SUCCESS) return err;
  *eventId = static_cast<uint32_t>((reinterpret_cast<uintptr_t>(event) >> 4) & 0xFFFF);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtIpcGetEventHandle(aclrtEvent event, aclrtIpcEventHandle* handle) {
  if (aclError rc = forbid_ipc_on_this_chip("aclrtIpcGetEventHandle"); rc != ACL_SUCCESS) return rc;
  if (handle == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcGetEventHandle: null output");
  aclError err = ACL_SUCCESS;
  auto e = lookup(event, "aclrtIpcGetEventHandle", &err);
  if (e == nullptr) return err;
  if (!e->is_ipc()) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtIpcGetEventHandle: the event was not created with ACL_EVENT_IPC");
  }
  std::lock_guard<std::mutex> lock(e->mu);
  if (!e->exported) {
    broker::Export ex;
    ex.kind = broker::Kind::Event;
    ex.owner = e->core;
    ex.fd = e->core->fd();
    ex.device = e->core->device();
    ex.check_pid = false;
    if ((err = broker::publish(std::move(ex), &e->ticket)) != ACL_SUCCESS) return err;
    e->exported = true;
  }
  std::string text = broker::format_ticket(broker::Kind::Event, e->ticket);
  std::memset(handle->reserved, 0, sizeof(handle->reserved));
  std::memcpy(handle->reserved, text.data(), std::min(text.size(), sizeof(handle->reserved) - 1));
  count(Counter::IpcEventHandleExport);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtIpcOpenEventHandle(aclrtIpcEventHandle handle, aclrtEvent* event) {
  if (aclError rc = forbid_ipc_on_this_chip("aclrtIpcOpenEventHandle"); rc != ACL_SUCCESS) return rc;
  if (event == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtIpcOpenEventHandle: null output");
  broker::Ticket t;
  if (!broker::parse_ticket(broker::Kind::Event, handle.reserved, sizeof(handle.reserved), &t)) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtIpcOpenEventHandle: not a valid IPC event handle");
  }
  int dev = -1;
  aclError err = require_current_device(&dev);
  if (err != ACL_SUCCESS) return err;
  broker::Grant g;
  if ((err = broker::request(broker::Kind::Event, t, &g)) != ACL_SUCCESS) return err;
  auto e = std::make_shared<Event>();
  e->flags = ACL_EVENT_IPC;
  e->imported = true;
  e->core = EventCore::map_shared(g.fd, &err);
  if (e->core == nullptr) return err;
  count(Counter::IpcEventOpen);
  *event = events().add(std::move(e));
  return ACL_SUCCESS;
}

}  // extern "C"
