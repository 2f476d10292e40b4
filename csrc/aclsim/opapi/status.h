// Status codes and the internal error type of the simulated libopapi.so.
//
// aclnn entry points return an aclnnStatus (an int32). Inside the library,
// validation code throws OpError; the exported wrappers catch it, record the
// message with aclsim::fail (so aclGetRecentErrMsg reports it) and return the
// code. Nothing throws across the C ABI.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

// Marks a function as part of libopapi.so's C ABI. The library is built with
// -fvisibility=hidden, so only functions carrying this marker are exported.
#define OPAPI_EXPORT extern "C" __attribute__((visibility("default")))

namespace aclsim::opapi {

using aclnnStatus = int32_t;

// The numeric values CANN's aclnn_status.h uses.
constexpr aclnnStatus kSuccess = 0;
constexpr aclnnStatus kErrParamNullptr = 161001;
constexpr aclnnStatus kErrParamInvalid = 161002;
constexpr aclnnStatus kErrRuntime = 361001;
constexpr aclnnStatus kErrInner = 561000;

// A refused operator call: `code` is returned to the caller, the message is
// recorded as the thread's most recent error.
class OpError : public std::runtime_error {
 public:
  OpError(aclnnStatus code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  aclnnStatus code() const { return code_; }

 private:
  aclnnStatus code_;
};

[[noreturn]] inline void throw_invalid(const std::string& message) {
  throw OpError(kErrParamInvalid, message);
}

[[noreturn]] inline void throw_nullptr(const std::string& what) {
  throw OpError(kErrParamNullptr, what + " must not be null");
}

}  // namespace aclsim::opapi
