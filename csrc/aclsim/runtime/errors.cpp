// Thread-local "most recent error" bookkeeping behind aclGetRecentErrMsg,
// aclrtGetLastError and aclrtPeekAtLastError.
//
// CANN's documented contract for aclGetRecentErrMsg (hicann/runtime,
// docs/api_docs/aclGetRecentErrMsg.md): it returns AND clears the messages of
// the calls that failed on this thread since the last read, newest first;
// unread messages pile up; nullptr when there is none; and only the pointer of
// the latest read stays valid. So a failing call never invalidates a message
// already handed out: torch_npu reads it, then calls aclrtGetDevice (which may
// fail too) before it copies the text.
#include "aclsim/runtime.h"

#include <deque>
#include <string>

namespace {
constexpr size_t kKeptMessages = 16;  // unread messages beyond these are dropped, oldest first
thread_local std::deque<std::string> t_unread;
thread_local std::string t_returned;  // what the latest aclGetRecentErrMsg handed out
thread_local aclError t_code = ACL_SUCCESS;
}  // namespace

namespace aclsim {

aclError fail(aclError code, std::string message) {
  t_code = code;
  // Messages relayed from another thread (a stream's failed task) already
  // carry the prefix.
  t_unread.push_back(message.rfind("aclsim: ", 0) == 0 ? std::move(message) : "aclsim: " + message);
  if (t_unread.size() > kKeptMessages) t_unread.pop_front();
  return code;
}

aclError fail_quietly(aclError code) {
  t_code = code;
  return code;
}

}  // namespace aclsim

extern "C" {

ACLSIM_API const char* aclGetRecentErrMsg() {
  if (t_unread.empty()) return nullptr;
  t_returned.clear();
  for (auto it = t_unread.rbegin(); it != t_unread.rend(); ++it) {
    if (!t_returned.empty()) t_returned += '\n';
    t_returned += *it;
  }
  t_unread.clear();
  return t_returned.c_str();
}

ACLSIM_API aclError aclrtGetLastError(aclrtLastErrLevel /*level*/) {
  aclError code = t_code;
  t_code = ACL_SUCCESS;
  return code;
}

ACLSIM_API aclError aclrtPeekAtLastError(aclrtLastErrLevel /*level*/) { return t_code; }

}  // extern "C"
