// Shared reference slots that keep a producer's shared memory alive.
//
// Each send of a tensor takes one slot in a table the producer owns (a POSIX
// shared-memory file). The receiver CLAIMS the slot when it rebuilds the
// tensor, marks it RELEASING when its storage dies, and RELEASES it once its
// streams finished with the memory. An exiting producer waits for releases on
// their way, and asks receivers to FENCE the tensors they still hold: each
// marks its slots once the work queued by then on its devices has run. A
// slot word packs (generation, state, holder pid), so every transition is one
// compare-and-swap and a stale or replayed descriptor can never claim a
// reused slot.
//
// The producer reclaims slots whose holder died (kill -9) and, after a
// timeout, slots nobody claimed (a message that was never received): a late
// receiver then gets a clear error instead of freed memory.
//
// File names carry the pid namespace, pid and process start time, so they
// cannot collide, and files left by a crashed producer in this namespace are
// removed by the next process that creates a table.
//
// Receivers keep the 16 most recently opened tables mapped (a receiver gets
// every tensor of a producer through the same few tables, and mapping one
// per tensor cost a shm_open, an mmap and an munmap each time). Whether the
// owner still runs is answered by a pidfd opened once per table (poll, no
// /proc access); without pidfd_open, by reading /proc at most every 50 ms.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace torch_npu_ipc {

// Free -> Sent (take) -> Claimed (claim) -> Releasing (mark_releasing) -> Free
// (release). Releasing keeps the claimer's pid: a receiver that dies before
// its release arrives is collected like one that held the slot.
enum class SlotState : uint32_t { Free = 0, Sent = 1, Claimed = 2, Releasing = 3 };

// One pass's census of a table (see RefTable::counts).
struct SlotCounts {
  uint32_t sent = 0;            // not received yet
  uint32_t claimed = 0;         // received and held, `self`'s included
  uint32_t releasing = 0;       // dropped by their receiver, release on its way, `self`'s included
  uint32_t claimed_self = 0;    // those of `claimed` whose receiver is `self`
  uint32_t releasing_self = 0;  // those of `releasing` whose receiver is `self`
  // Those of `claimed`, not `self`'s, whose receiver answered the latest
  // fence request: the work queued on their devices then has run.
  uint32_t fenced = 0;
};

struct SlotRef {
  uint32_t index = 0;
  uint32_t generation = 0;
};

// An owned file descriptor (closed on destruction).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// Liveness of other processes, memoized for one pass over the slots (a
// receiver holding many slots is looked up once).
// Maps a pid to the start time of the process using it now (0: none).
using PidMemo = std::unordered_map<int32_t, uint64_t>;

class RefTable {
  struct Key {};

 public:
  static constexpr uint32_t kSlots = 4096;

  // A new table owned by this process (name() gives its shm name).
  static std::shared_ptr<RefTable> create();
  // Opens another process's table by name. Tables stay cached while in use,
  // and the 16 most recently opened ones stay mapped after that.
  static std::shared_ptr<RefTable> open(const std::string& name);
  // Forwarder: opens another table of this table's owner that has a free
  // slot and takes it as take() does, or returns nullptr when none has. A
  // forwarder cannot add tables to its producer's; the owner numbers its
  // tables from its first, and keeps them all until it exits.
  std::shared_ptr<RefTable> take_in_sibling(SlotRef* out, uint64_t tag, uint64_t fingerprint) const;

  RefTable(Key, std::string name, void* base, bool owner);
  ~RefTable();  // unmaps; the owner also unlinks the name
  RefTable(const RefTable&) = delete;
  RefTable& operator=(const RefTable&) = delete;

  const std::string& name() const { return name_; }
  int32_t owner_pid() const;
  // True while the owner runs (a zombie counts as exited). Cheap: a poll on
  // the owner's pidfd, or a /proc read at most every 50 ms without pidfd.
  bool owner_alive() const;
  // The thorough check, for error paths: also reads /proc now, where an
  // exiting owner shows as a zombie while its last threads still run (and
  // its pidfd is not readable yet).
  bool owner_alive_now() const;

  // Producer or forwarder: takes a free slot in state Sent, tagged with the
  // producer's block id `tag` (a forwarder copies the tag of the slot it
  // received, so the producer knows the block is still referenced). Returns
  // false when the table is full.
  // `fingerprint` summarizes what the send describes (see fingerprint()).
  bool take(SlotRef* out, uint64_t tag, uint64_t fingerprint);
  // Receiver, before trusting a descriptor: the fingerprint its sender
  // stored with the slot. False when the slot is no longer Sent with this
  // generation (received already, reclaimed, or never sent).
  bool fingerprint(const SlotRef& ref, uint64_t* out) const;
  // The block tag of a slot (0 if it was reused since).
  uint64_t tag(const SlotRef& ref) const;
  // True while any slot tagged `tag` is not Free.
  bool tag_live(uint64_t tag) const;
  // Adds the tag of every slot that is not Free to `out` (one pass); with
  // `releasing`, the tags of Releasing slots go there instead.
  void live_tags(std::unordered_set<uint64_t>* out, std::unordered_set<uint64_t>* releasing = nullptr) const;
  // Receiver: Sent -> Claimed by this pid. False when the slot was
  // reclaimed or claimed by someone else.
  bool claim(const SlotRef& ref);
  // Receiver, when its storage dies: Claimed -> Releasing (the holder pid
  // kept). No effect on a slot in any other state or generation.
  void mark_releasing(const SlotRef& ref);
  // Owner, when it exits: asks receivers to fence the slots they hold (see
  // mark_fenced).
  void request_fence();
  // The owner's latest fence request (0: none).
  uint32_t fence_request() const;
  // Owner, at the end of its exit wait (it then warns about what receivers
  // still hold); a receiver that finds the owner gone without it warns instead.
  void mark_exit_waited();
  bool exit_waited() const;
  // Receiver, answering fence request `request`: the work queued on the
  // slot's device when it saw the request has run. No effect
  // on a slot that is not Claimed in this generation.
  void mark_fenced(const SlotRef& ref, uint32_t request);
  // Any state but Free -> Free, for this generation (the next take bumps it).
  void release(const SlotRef& ref);
  // True while the slot is not Free with this generation.
  bool live(const SlotRef& ref) const;
  SlotState state(const SlotRef& ref) const;
  // The slots that are not Free, by state, and those `self` received.
  SlotCounts counts(int32_t self) const;
  // Owner: frees the slot if it is still Sent (a descriptor nobody
  // received); false when a receiver claimed it first, or it is gone.
  bool reclaim_unclaimed(const SlotRef& ref);
  // Owner: reclaims the Sent slots other processes (forwarders) took in this
  // table and nobody claimed within `timeout` of this process first seeing
  // them (the owner does not know when they were sent); returns how many.
  // Call under the caller's lock: it keeps the first-seen times.
  uint32_t reclaim_unclaimed_forwards(std::chrono::steady_clock::duration timeout);
  // Owner: frees slots Claimed or Releasing by processes that no longer exist, a reused
  // pid included (the claimer's start time is kept per slot); returns how
  // many. `memo` caches each holder's liveness for the pass.
  uint32_t reclaim_dead_holders(PidMemo* memo);

 private:
  std::atomic<uint64_t>* word(uint32_t index) const;
  // One /proc read: the owner's pid runs, is no zombie, and started when the
  // table's name says (a reused pid is another process).
  bool owner_in_proc() const;
  std::atomic<uint64_t>* tag_word(uint32_t index) const;
  std::atomic<uint64_t>* holder_word(uint32_t index) const;
  std::atomic<uint64_t>* fingerprint_word(uint32_t index) const;
  std::atomic<uint64_t>* fence_word(uint32_t index) const;

  std::string name_;
  void* base_;
  bool owner_;
  uint64_t owner_start_ = 0;  // owner's start time, from the name (0: unknown)
  // Owner: when each forwarded Sent slot ((index << 32) | generation) was
  // first seen by reclaim_unclaimed_forwards.
  std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> forward_seen_;

  // Liveness of the owner (receivers and forwarders only).
  mutable std::mutex alive_mu_;
  mutable bool pidfd_tried_ = false;
  mutable UniqueFd pidfd_;
  mutable bool owner_dead_ = false;  // sticky: a process does not come back
  mutable std::chrono::steady_clock::time_point last_proc_check_{};
};

// Removes shared-memory tables of dead processes of this pid namespace.
void remove_stale_tables();

// True while a process runs under `pid` (a zombie does not count). One /proc
// read: for error paths.
bool pid_running(int32_t pid);

}  // namespace torch_npu_ipc
