// Hands device memory and IPC event tables to other processes.
//
// Every process that exports something runs one listener thread on an
// abstract Unix socket named after its pid namespace and pid. An importer
// connects to the exporter named in the key or handle, asks for an export
// by id and nonce, and receives the memfd through SCM_RIGHTS. The kernel's
// SO_PEERCRED gives the importer's pid, which is how pid validation is
// enforced. Abstract sockets vanish with their process: nothing is left in
// /dev/shm or on disk, a crashed process leaves no stale name behind, and a
// name cannot collide with a live one.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aclsim/runtime.h"

namespace aclsim {
namespace broker {

enum class Kind : uint32_t { Memory = 1, Event = 2 };

struct Export {
  Kind kind = Kind::Memory;
  std::weak_ptr<void> owner;  // the allocation or event core; expired = gone
  int fd = -1;                // borrowed from the owner
  uint64_t offset = 0;
  uint64_t size = 0;
  int32_t device = 0;
  bool check_pid = true;
  std::vector<int32_t> allowed_pids;
};

struct Ticket {
  int32_t pid = 0;
  uint64_t id = 0;
  uint64_t nonce = 0;
};

struct Grant {
  int fd = -1;  // owned by the caller
  uint64_t offset = 0;
  uint64_t size = 0;
  int32_t device = 0;
};

// Exporter side. publish() starts the listener on first use.
aclError publish(Export e, Ticket* out);
bool retract(const Ticket& t);
aclError allow_pids(const Ticket& t, const int32_t* pids, size_t n);

// Importer side: asks the exporting process for the object.
aclError request(Kind kind, const Ticket& t, Grant* out);

// Ticket <-> text ("aclsim:<m|e>:<pid>:<id>:<nonce>") used in keys and handles.
std::string format_ticket(Kind kind, const Ticket& t);
bool parse_ticket(Kind kind, const char* text, size_t max_len, Ticket* out);

}  // namespace broker
}  // namespace aclsim
