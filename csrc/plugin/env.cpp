#include "env.h"

#include <cstdlib>

namespace torch_npu_ipc {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return end != v && *end == '\0' && x >= 0 ? x : fallback;
}

}  // namespace torch_npu_ipc
