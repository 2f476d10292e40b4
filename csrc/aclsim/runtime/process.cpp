#include "process.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

namespace aclsim {
namespace {

std::atomic<int32_t> cached_pid{0};  // 0: not read yet, or reset in a forked child

// State and start time (clock ticks since boot, field 22) of /proc/<pid>/stat.
bool read_proc_stat(int32_t pid, char* state, uint64_t* start_ticks) {
  std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat_file, line)) return false;
  const size_t paren = line.rfind(')');  // the command name may hold ')'
  if (paren == std::string::npos) return false;
  std::istringstream fields(line.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3) *state = field[0];
    if (i == 22) {
      *start_ticks = std::strtoull(field.c_str(), nullptr, 10);
      return true;
    }
  }
  return false;
}

}  // namespace

int32_t own_pid() {
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, [] { cached_pid.store(0); }); });
  int32_t pid = cached_pid.load(std::memory_order_relaxed);
  if (pid == 0) {
    pid = static_cast<int32_t>(getpid());
    cached_pid.store(pid, std::memory_order_relaxed);
  }
  return pid;
}

uint32_t own_start() {
  static std::atomic<uint64_t> cached{0};  // pid << 32 | start
  const auto pid = static_cast<uint32_t>(own_pid());
  const uint64_t c = cached.load(std::memory_order_relaxed);
  if (c >> 32 == pid) return static_cast<uint32_t>(c);
  char state = 0;
  uint64_t ticks = 0;
  const uint32_t start = read_proc_stat(static_cast<int32_t>(pid), &state, &ticks) ? static_cast<uint32_t>(ticks) : 0;
  cached.store((uint64_t{pid} << 32) | start, std::memory_order_relaxed);
  return start;
}

bool process_alive(int32_t pid, uint32_t start) {
  if (pid <= 0 || pid == own_pid()) return true;
  if (kill(pid, 0) != 0 && errno != EPERM) return false;
  char state = 0;
  uint64_t ticks = 0;
  if (!read_proc_stat(pid, &state, &ticks)) return true;  // no procfs: trust kill()
  if (state == 'Z' || state == 'X') return false;
  return start == 0 || static_cast<uint32_t>(ticks) == start;
}

}  // namespace aclsim
