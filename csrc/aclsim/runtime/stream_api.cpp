// ACL stream calls.
#include <chrono>

#include "device.h"
#include "stream.h"

using namespace aclsim;

namespace {

aclError create_stream(aclrtStream* out) {
  if (out == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "create stream: null output");
  int dev = -1;
  if (aclError rc = require_current_device(&dev); rc != ACL_SUCCESS) return rc;
  *out = stream_table().add(std::make_shared<Stream>(dev, /*is_default=*/false));
  count(Counter::StreamCreate);
  return ACL_SUCCESS;
}

aclError destroy_stream(aclrtStream stream, bool force) {
  if (stream == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream: null stream");
  aclError err = ACL_SUCCESS;
  auto s = resolve_work_stream(stream, "aclrtDestroyStream", &err);
  if (s == nullptr) return err;
  if (s->is_default()) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "destroy stream: the default stream cannot be destroyed");
  }
  stream_table().remove(stream);
  if (force) {
    s->discard_pending();
  } else {
    // As CANN documents for aclrtDestroyStream: the call returns once the
    // stream's queued work has run. A failed task is not reported here.
    (void)s->synchronize(-1);
  }
  count(Counter::StreamDestroy);
  return ACL_SUCCESS;
}

aclError sync_stream(aclrtStream stream, int32_t timeout_ms) {
  if (aclError rc = check_sync_timeout(timeout_ms, "aclrtSynchronizeStreamWithTimeout"); rc != ACL_SUCCESS) return rc;
  count(Counter::SynchronizeStream);
  aclError err = ACL_SUCCESS;
  auto s = resolve_stream(stream, &err);
  if (s == nullptr) return err;
  return s->synchronize(timeout_ms);
}

}  // namespace

extern "C" {

ACLSIM_API aclError aclrtCreateStream(aclrtStream* stream) { return create_stream(stream); }

ACLSIM_API aclError aclrtCreateStreamWithConfig(aclrtStream* stream, uint32_t /*priority*/, uint32_t /*flag*/) {
  return create_stream(stream);
}

ACLSIM_API aclError aclrtDestroyStream(aclrtStream stream) { return destroy_stream(stream, false); }

ACLSIM_API aclError aclrtDestroyStreamForce(aclrtStream stream) { return destroy_stream(stream, true); }

ACLSIM_API aclError aclrtSynchronizeStream(aclrtStream stream) { return sync_stream(stream, -1); }

ACLSIM_API aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout) {
  return sync_stream(stream, timeout);
}

ACLSIM_API aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus* status) {
  if (status == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtStreamQuery: null output");
  aclError err = ACL_SUCCESS;
  auto s = resolve_stream(stream, &err);
  if (s == nullptr) return err;
  *status = s->idle() ? ACL_STREAM_STATUS_COMPLETE : ACL_STREAM_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode) {
  aclError err = ACL_SUCCESS;
  auto s = resolve_stream(stream, &err);
  if (s == nullptr) return err;
  if (mode != ACL_CONTINUE_ON_FAILURE && mode != ACL_STOP_ON_FAILURE) {
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetStreamFailureMode: unknown mode");
  }
  s->set_stop_on_failure(mode == ACL_STOP_ON_FAILURE);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtStreamGetId(aclrtStream stream, int32_t* streamId) {
  if (streamId == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtStreamGetId: null output");
  aclError err = ACL_SUCCESS;
  if (resolve_stream(stream, &err) == nullptr) return err;
  *streamId = static_cast<int32_t>((reinterpret_cast<uintptr_t>(stream) >> 4) & 0xFFFF);
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void* args) {
  if (fn == nullptr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtLaunchHostFunc: null function");
  return enqueue(stream, "aclrtLaunchHostFunc", [fn, args] {
    fn(args);
    return ACL_SUCCESS;
  });
}

ACLSIM_API aclError aclrtSetStreamOverflowSwitch(aclrtStream stream, uint32_t /*flag*/) {
  aclError err = ACL_SUCCESS;
  return resolve_stream(stream, &err) == nullptr ? err : ACL_SUCCESS;
}

ACLSIM_API aclError aclrtGetStreamOverflowSwitch(aclrtStream stream, uint32_t* flag) {
  aclError err = ACL_SUCCESS;
  if (resolve_stream(stream, &err) == nullptr) return err;
  if (flag != nullptr) *flag = 0;
  return ACL_SUCCESS;
}

// Simulator control: enqueue `nanoseconds` of device work on a stream, so
// tests and benchmarks can make work slow and observe overlap and races.
// Not an ACL call: it takes a stream of any device, whatever is current.
ACLSIM_API aclError aclsimStreamSleep(aclrtStream stream, uint64_t nanoseconds) {
  aclError err = ACL_SUCCESS;
  auto s = resolve_stream(stream, &err);
  if (s == nullptr) return err;
  return s->enqueue("aclsimStreamSleep", [nanoseconds] {
    spend_device_time(std::chrono::nanoseconds(nanoseconds));
    return ACL_SUCCESS;
  });
}

}  // extern "C"
