#include "env.h"

#include <algorithm>
#include <cstdlib>

namespace torch_npu_ipc {

int64_t env_int(const char* name, int64_t fallback, int64_t largest) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  int64_t x = 0;
  for (const char* c = v; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return fallback;
    if (x <= largest) x = x * 10 + (*c - '0');  // stops growing past `largest`: no overflow
  }
  return std::min(x, largest);
}

}  // namespace torch_npu_ipc
