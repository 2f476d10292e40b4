// This process's identity as the simulated runtime records it (pid and start
// time, cached: glibc makes every getpid() a system call, and an event record
// stores both), and whether another process that recorded something still runs.
#pragma once

#include <cstdint>

namespace aclsim {

// getpid(), cached; a forked child sees its own pid.
int32_t own_pid();

// Low 32 bits of this process's start time (clock ticks since boot), cached
// per pid; 0 without procfs.
uint32_t own_start();

// Whether process `pid`, started at `start` (0: unknown), still runs. A
// zombie counts as dead, and so does a live process with that pid but another
// start time (the pid was reused after the original died).
bool process_alive(int32_t pid, uint32_t start);

}  // namespace aclsim
