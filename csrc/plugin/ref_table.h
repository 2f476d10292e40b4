// Shared reference slots that keep a producer's shared memory alive.
//
// Each send of a tensor takes one slot in a table the producer owns (a POSIX
// shared-memory file). The receiver CLAIMS the slot when it rebuilds the
// tensor and RELEASES it when its storage dies (after its stream finished
// with the memory). A slot word packs (generation, state, holder pid), so
// every transition is one compare-and-swap and a stale or replayed
// descriptor can never claim a reused slot.
//
// The producer reclaims slots whose holder died (kill -9) and, after a
// timeout, slots nobody claimed (a message that was never received): a late
// receiver then gets a clear error instead of freed memory.
//
// File names carry the pid namespace, pid and process start time, so they
// cannot collide, and files left by a crashed producer in this namespace are
// removed by the next process that creates a table.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace torch_npu_ipc {

enum class SlotState : uint32_t { Free = 0, Sent = 1, Claimed = 2 };

struct SlotRef {
  uint32_t index = 0;
  uint32_t generation = 0;
};

class RefTable {
  struct Key {};

 public:
  static constexpr uint32_t kSlots = 4096;

  // A new table owned by this process (name() gives its shm name).
  static std::shared_ptr<RefTable> create();
  // Opens another process's table by name (cached per name).
  static std::shared_ptr<RefTable> open(const std::string& name);

  RefTable(Key, std::string name, void* base, bool owner);
  ~RefTable();  // unmaps; the owner also unlinks the name
  RefTable(const RefTable&) = delete;
  RefTable& operator=(const RefTable&) = delete;

  const std::string& name() const { return name_; }
  int32_t owner_pid() const;
  bool owner_alive() const;

  // Producer or forwarder: takes a free slot in state Sent, tagged with the
  // producer's block id `tag` (a forwarder copies the tag of the slot it
  // received, so the producer knows the block is still referenced). Returns
  // false when the table is full.
  bool take(SlotRef* out, uint64_t tag);
  // The block tag of a slot (0 if it was reused since).
  uint64_t tag(const SlotRef& ref) const;
  // True while any slot tagged `tag` is Sent or Claimed.
  bool tag_live(uint64_t tag) const;
  // Receiver: Sent -> Claimed by this pid. False when the slot was
  // reclaimed or claimed by someone else.
  bool claim(const SlotRef& ref);
  // Claimed -> Free (generation + 1).
  void release(const SlotRef& ref);
  // True while the slot is Sent or Claimed with this generation.
  bool live(const SlotRef& ref) const;
  SlotState state(const SlotRef& ref) const;
  // Slots currently Sent or Claimed.
  uint32_t live_count() const;
  // Owner: frees the slot whatever its state (used for dead holders and
  // unclaimed timeouts).
  void reclaim(const SlotRef& ref);
  // Owner: frees slots claimed by processes that no longer exist; returns
  // how many.
  uint32_t reclaim_dead_holders();

 private:
  std::atomic<uint64_t>* word(uint32_t index) const;
  std::atomic<uint64_t>* tag_word(uint32_t index) const;

  std::string name_;
  void* base_;
  bool owner_;
};

// Removes shared-memory tables of dead processes of this pid namespace.
void remove_stale_tables();

}  // namespace torch_npu_ipc
