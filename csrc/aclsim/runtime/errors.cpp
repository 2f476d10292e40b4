// Thread-local "most recent error" bookkeeping behind aclGetRecentErrMsg,
// aclrtGetLastError and aclrtPeekAtLastError.
#include "aclsim/runtime.h"

#include <string>

namespace {
thread_local std::string t_message;
thread_local aclError t_code = ACL_SUCCESS;
}  // namespace

namespace aclsim {

aclError fail(aclError code, std::string message) {
  t_code = code;
  // Messages relayed from another thread (a stream's failed task) already
  // carry the prefix.
  t_message = message.rfind("aclsim: ", 0) == 0 ? std::move(message) : "aclsim: " + message;
  return code;
}

}  // namespace aclsim

extern "C" {

ACLSIM_API const char* aclGetRecentErrMsg() {
  // CANN returns nullptr when there is nothing to report; the message stays
  // valid until the next failing call on this thread.
  return t_message.empty() ? nullptr : t_message.c_str();
}

ACLSIM_API aclError aclrtGetLastError(aclrtLastErrLevel /*level*/) {
  aclError code = t_code;
  t_code = ACL_SUCCESS;
  return code;
}

ACLSIM_API aclError aclrtPeekAtLastError(aclrtLastErrLevel /*level*/) { return t_code; }

}  // extern "C"
