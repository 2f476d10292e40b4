// The state machine behind every event, local or IPC, modelled on CANN's
// IPC event: a table of slots plus the index of the current one.
//
//   record: take a free slot, enqueue a task that marks it done (and wakes
//           waiters), then make it current: a wait only ever binds to a
//           record whose task is already queued.
//   wait:   bound to the record current when the wait is ISSUED: if there is
//           none, or it is already done, nothing to do; else pin the slot and
//           enqueue a task that blocks the waiting stream until it is done.
//   query:  complete when never recorded or the current slot is done.
//   wait status (old-style events only, as on CANN): complete unless a wait
//           task issued on the event has not finished yet.
//
// For an IPC event the table lives in a memfd that importers map, so the
// same code signals across processes (futex on the slot's state word). A
// slot whose recording process died before signalling is declared
// abandoned: waiters fail with an error instead of hanging.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "aclsim/runtime.h"

namespace aclsim {

class Stream;
struct EventTable;  // the (possibly shared) memory layout

class EventCore : public std::enable_shared_from_this<EventCore> {
  struct Key {};  // only EventCore's factories construct one

 public:
  static constexpr uint32_t kLocalSlots = 64;
  static constexpr uint32_t kIpcSlots = 8192;  // as in CANN

  // A table in private memory.
  static std::shared_ptr<EventCore> create_local(int device);
  // A table in a fresh memfd (fd() can be passed to other processes).
  static std::shared_ptr<EventCore> create_shared(int device, aclError* err);
  // Maps a table received from another process; takes ownership of fd.
  static std::shared_ptr<EventCore> map_shared(int fd, aclError* err);

  EventCore(Key, EventTable* table, size_t bytes, int fd, bool shared);
  ~EventCore();
  EventCore(const EventCore&) = delete;
  EventCore& operator=(const EventCore&) = delete;

  int fd() const { return fd_; }
  int device() const;

  aclError record(Stream& stream);
  aclError wait(Stream& stream);
  aclError reset(Stream& stream);
  // *complete = no record yet, or the latest one ran.
  aclError query(bool* complete);
  // Blocks the host until the latest record (at call time) ran.
  aclError synchronize(int32_t timeout_ms);
  // Device time (ns, CLOCK_MONOTONIC) at which the latest record ran.
  aclError timestamp(uint64_t* ns);
  // Whether a wait task issued by this process on the event is still
  // queued or blocked (CANN's aclrtQueryEventWaitStatus: NOT_READY).
  bool waits_pending() const { return pending_waits_.load(std::memory_order_acquire) != 0; }

 private:
  static std::shared_ptr<EventCore> make(int device, uint32_t slots, bool shared, aclError* err);
  friend struct WaitHold;

  EventTable* table_;
  size_t bytes_;
  int fd_;
  bool shared_;
  std::atomic<uint32_t> pending_waits_{0};
};

}  // namespace aclsim
