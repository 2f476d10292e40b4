#include "event_core.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "futex.h"
#include "process.h"
#include "stream.h"

namespace aclsim {

namespace {
enum SlotState : uint32_t { kFree = 0, kPending = 1, kDone = 2, kAbandoned = 3 };
constexpr uint32_t kMagic = 0x41435345;  // "ACSE"
constexpr uint32_t kVersion = 1;
constexpr int64_t kPollNs = 100'000'000;  // liveness check period of a blocked wait
}  // namespace

struct Slot {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> pins;
  std::atomic<int32_t> recorder_pid;
  std::atomic<uint32_t> recorder_start;  // low 32 bits of the recorder's start time (ticks since boot)
  std::atomic<uint64_t> done_ns;
};

struct EventTable {
  uint32_t magic;
  uint32_t version;
  uint32_t slot_count;
  int32_t device;
  pthread_mutex_t lock;
  std::atomic<uint32_t> current;  // slot index + 1; 0 = never recorded
  uint32_t reserved;
  std::atomic<uint64_t> records;
  Slot slots[1];  // slot_count entries follow
};

namespace {

size_t table_bytes(uint32_t slots) {
  size_t raw = offsetof(EventTable, slots) + sizeof(Slot) * slots;
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (raw + page - 1) / page * page;
}

// A steady_clock time in ns (CLOCK_MONOTONIC: the same in every process).
uint64_t to_ns(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

uint64_t now_ns() { return to_ns(std::chrono::steady_clock::now()); }

// Holds the table's process-shared robust mutex. A holder that died leaves
// the table consistent (every critical section is a handful of stores), so
// the lock is simply marked consistent again.
class TableLock {
 public:
  explicit TableLock(EventTable* t) : m_(&t->lock) {
    if (pthread_mutex_lock(m_) == EOWNERDEAD) pthread_mutex_consistent(m_);
  }
  ~TableLock() { pthread_mutex_unlock(m_); }
  TableLock(const TableLock&) = delete;
  TableLock& operator=(const TableLock&) = delete;

 private:
  pthread_mutex_t* m_;
};

// Blocks until the slot left the pending state. Returns an error when the
// recorder died first or the deadline passed.
aclError wait_slot(Slot& slot, int64_t deadline_ns) {
  for (;;) {
    uint32_t st = slot.state.load(std::memory_order_acquire);
    if (st == kDone) return ACL_SUCCESS;
    if (st == kAbandoned) {
      return fail(ACL_ERROR_RT_PARAM_INVALID, "the process that recorded this IPC event (pid " +
                                                  std::to_string(slot.recorder_pid.load()) +
                                                  ") exited before the record ran");
    }
    if (st != kPending) return ACL_SUCCESS;
    // Liveness before the deadline, so a zero-deadline check (query) reports
    // a dead recorder as such rather than as a timeout.
    if (!process_alive(slot.recorder_pid.load(), slot.recorder_start.load())) {
      uint32_t expected = kPending;
      if (slot.state.compare_exchange_strong(expected, kAbandoned)) futex_wake_all(&slot.state);
      continue;
    }
    int64_t now = static_cast<int64_t>(now_ns());
    if (deadline_ns >= 0 && now >= deadline_ns) return fail(ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, "event wait timed out");
    int64_t step = kPollNs;
    if (deadline_ns >= 0 && deadline_ns - now < step) step = deadline_ns - now;
    futex_wait(&slot.state, kPending, step);
  }
}

}  // namespace

// A wait task's hold on its slot (pinned under the table lock so that no
// record reuses it) and on its event (counted as a pending wait; the table
// stays mapped). Released when the task is gone: after it ran, or when the
// stream dropped it unrun (forced stream destroy, stream stopped by an
// earlier failure, refused enqueue).
struct WaitHold {
  WaitHold(Slot* s, std::shared_ptr<EventCore> c) : slot(s), core(std::move(c)) { core->pending_waits_.fetch_add(1); }
  ~WaitHold() {
    slot->pins.fetch_sub(1);
    core->pending_waits_.fetch_sub(1, std::memory_order_release);
  }
  WaitHold(const WaitHold&) = delete;
  WaitHold& operator=(const WaitHold&) = delete;
  Slot* slot;
  std::shared_ptr<EventCore> core;
};

EventCore::EventCore(Key, EventTable* table, size_t bytes, int fd, bool shared)
    : table_(table), bytes_(bytes), fd_(fd), shared_(shared) {}

EventCore::~EventCore() {
  munmap(table_, bytes_);
  if (fd_ >= 0) close(fd_);
}

int EventCore::device() const { return table_->device; }

std::shared_ptr<EventCore> EventCore::make(int device, uint32_t slots, bool shared, aclError* err) {
  const size_t bytes = table_bytes(slots);
  int fd = -1;
  void* p = MAP_FAILED;
  if (shared) {
    fd = memfd_create("aclsim-ipc-event", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
  } else {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (p == MAP_FAILED) {
    if (fd >= 0) close(fd);
    *err = fail(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, std::string("event table: ") + std::strerror(errno));
    return nullptr;
  }
  auto* t = static_cast<EventTable*>(p);  // zero-filled by mmap
  t->magic = kMagic;
  t->version = kVersion;
  t->slot_count = slots;
  t->device = device;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, shared ? PTHREAD_PROCESS_SHARED : PTHREAD_PROCESS_PRIVATE);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&t->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  *err = ACL_SUCCESS;
  return std::make_shared<EventCore>(Key{}, t, bytes, fd, shared);
}

std::shared_ptr<EventCore> EventCore::create_local(int device) {
  aclError err = ACL_SUCCESS;
  return make(device, kLocalSlots, false, &err);
}

std::shared_ptr<EventCore> EventCore::create_shared(int device, aclError* err) {
  return make(device, kIpcSlots, true, err);
}

std::shared_ptr<EventCore> EventCore::map_shared(int fd, aclError* err) {
  const size_t bytes = table_bytes(kIpcSlots);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    *err = fail(ACL_ERROR_RT_PARAM_INVALID, "IPC event: received table has the wrong size");
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    *err = fail(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, std::string("IPC event: ") + std::strerror(errno));
    return nullptr;
  }
  auto* t = static_cast<EventTable*>(p);
  if (t->magic != kMagic || t->version != kVersion || t->slot_count != kIpcSlots) {
    munmap(p, bytes);
    close(fd);
    *err = fail(ACL_ERROR_RT_PARAM_INVALID, "IPC event: received table is not an aclsim event table");
    return nullptr;
  }
  *err = ACL_SUCCESS;
  return std::make_shared<EventCore>(Key{}, t, bytes, fd, true);
}

// The record becomes the event's current one only once its task is queued
// on the stream. A wait binds to the current record and queues a task that
// blocks its stream until that record ran, so a wait must never see a record
// whose task is not queued yet: between publishing and queueing, the waiting
// stream could take on work (a wait on it, then a record another stream
// waits for) that the recording stream ends up queued behind, and the
// streams would deadlock. Ordering after an already queued task is what
// CUDA and CANN guarantee: a wait names a record issued before it.
// The table lock is not held across the enqueue (a host call on another
// stream, possibly in another process, must not wait for this one); the slot
// is pinned instead, so that no other record takes it over in between (its
// task may run, and mark it done, before it is published). A recorder
// process that dies in between leaves that one slot pinned, as a waiter
// process that dies with a pinned slot does.
aclError EventCore::record(Stream& stream) {
  const uint32_t n = table_->slot_count;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint32_t idx = n;
  for (;;) {
    {
      TableLock lock(table_);
      uint32_t cur = table_->current.load();
      for (uint32_t k = 0; k < n; ++k) {
        uint32_t cand = (cur + k) % n;  // cur is index + 1: start after the current slot
        if (cand + 1 == cur) continue;
        Slot& s = table_->slots[cand];
        if (s.state.load() != kPending && s.pins.load() == 0) {
          idx = cand;
          break;
        }
      }
      if (idx < n) {
        Slot& s = table_->slots[idx];
        s.recorder_pid.store(own_pid());
        s.recorder_start.store(own_start());
        s.done_ns.store(0);
        s.pins.fetch_add(1);  // until published (or given up)
        s.state.store(kPending, std::memory_order_release);
        break;
      }
    }
    // Every slot is pending or pinned: back-pressure until the device
    // catches up, like a full hardware queue.
    if (std::chrono::steady_clock::now() > deadline) {
      return fail(ACL_ERROR_RT_STREAM_TASK_FULL, "event record: all " + std::to_string(n) + " slots are busy");
    }
    Slot& oldest = table_->slots[table_->current.load() % n];
    futex_wait(&oldest.state, kPending, 1'000'000);
  }
  Slot* slot = &table_->slots[idx];
  // The task holds the core, so the table stays mapped even if the event is
  // destroyed before the record ran.
  aclError rc = stream.enqueue("aclrtRecordEvent", [slot, self = shared_from_this()] {
    // The device's time when it reached the record (see device_now), not when the worker woke.
    slot->done_ns.store(to_ns(device_now()));
    slot->state.store(kDone, std::memory_order_release);
    futex_wake_all(&slot->state);
    return ACL_SUCCESS;
  });
  TableLock lock(table_);
  if (rc != ACL_SUCCESS) {
    // Refused: the event stays as it was; the slot was never visible.
    slot->state.store(kFree, std::memory_order_release);
    slot->pins.fetch_sub(1);
    futex_wake_all(&slot->state);
    return rc;
  }
  table_->current.store(idx + 1, std::memory_order_release);
  table_->records.fetch_add(1);
  slot->pins.fetch_sub(1);
  return ACL_SUCCESS;
}

aclError EventCore::wait(Stream& stream) {
  Slot* slot = nullptr;
  {
    TableLock lock(table_);
    uint32_t cur = table_->current.load();
    if (cur == 0) return ACL_SUCCESS;  // wait before any record: no-op
    slot = &table_->slots[cur - 1];
    uint32_t st = slot->state.load();
    if (st == kDone) return ACL_SUCCESS;
    if (st == kAbandoned) return wait_slot(*slot, 0);
    slot->pins.fetch_add(1);
  }
  auto hold = std::make_shared<WaitHold>(slot, shared_from_this());  // slot already pinned
  return stream.enqueue("aclrtStreamWaitEvent", [slot, hold] { return wait_slot(*slot, -1); });
}

// The reset runs in stream order, but records are published when issued: a
// record issued after the reset (on its stream, behind it) is already
// current when the reset's task runs, and must survive it, as on CANN where
// the device runs the reset, then the record. `records` counts publishes.
aclError EventCore::reset(Stream& stream) {
  const uint64_t issued_after = table_->records.load();
  return stream.enqueue("aclrtResetEvent", [self = shared_from_this(), issued_after] {
    TableLock lock(self->table_);
    if (self->table_->records.load() == issued_after) self->table_->current.store(0);
    return ACL_SUCCESS;
  });
}

aclError EventCore::query(bool* complete) {
  uint32_t cur = table_->current.load(std::memory_order_acquire);
  if (cur == 0) {
    *complete = true;
    return ACL_SUCCESS;
  }
  Slot& s = table_->slots[cur - 1];
  uint32_t st = s.state.load(std::memory_order_acquire);
  if (st == kPending && !process_alive(s.recorder_pid.load(), s.recorder_start.load())) return wait_slot(s, 0);
  if (st == kAbandoned) return wait_slot(s, 0);
  *complete = st != kPending;
  return ACL_SUCCESS;
}

aclError EventCore::synchronize(int32_t timeout_ms) {
  Slot* slot = nullptr;
  {
    TableLock lock(table_);
    uint32_t cur = table_->current.load();
    if (cur == 0) return ACL_SUCCESS;
    slot = &table_->slots[cur - 1];
    slot->pins.fetch_add(1);
  }
  int64_t deadline = timeout_ms < 0 ? -1 : static_cast<int64_t>(now_ns()) + int64_t{timeout_ms} * 1'000'000;
  aclError rc = wait_slot(*slot, deadline);
  slot->pins.fetch_sub(1);
  return rc;
}

aclError EventCore::timestamp(uint64_t* ns) {
  uint32_t cur = table_->current.load();
  if (cur == 0) return fail(ACL_ERROR_RT_PARAM_INVALID, "event was never recorded");
  Slot& s = table_->slots[cur - 1];
  if (s.state.load() != kDone) return fail(ACL_ERROR_RT_PARAM_INVALID, "event record has not run yet");
  *ns = s.done_ns.load();
  return ACL_SUCCESS;
}

}  // namespace aclsim
