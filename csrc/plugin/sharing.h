// Event-synchronized sharing of NPU storages between processes.
//
// Producer (share): export the allocator segment's IPC key, take a shared
// reference slot, record a pooled IPC event on the current stream (no host
// synchronization), and describe all of it in a Descriptor. The storage's
// DataPtr is swapped for one that, when the producer drops the storage,
// parks the block in a limbo list while any slot is live.
// Consumer (rebuild): import the block (cached), claim the slot, make the
// current stream wait on the event (always, even on a cache hit), and wrap
// the memory in a storage whose deleter releases the slot once the
// consumer's stream finished with it (releaser.h). While it holds the
// storage, it answers the producer's exit fence request (exit_fencer.h).
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Storage.h>

#include "torch_npu/csrc/core/npu/NPUStream.h"

#include <cstdint>
#include <string>

namespace torch_npu_ipc {

struct Descriptor {
  int32_t producer_pid = 0;
  int64_t device = 0;             // device of the exported memory
  std::string mem_key;            // ACL IPC memory key
  uint64_t block_size = 0;        // bytes exported under the key
  uint64_t storage_offset = 0;    // bytes from the exported base to the storage
  uint64_t storage_nbytes = 0;
  std::string ref_table;          // shared reference table (shm name)
  uint32_t slot_index = 0;
  uint32_t slot_generation = 0;
  std::string event_handle;       // 64 bytes; empty when the producer synchronized instead
};

// Producer side. Never blocks the host while fewer than the in-flight
// budget of events await their receivers; past it, synchronizes the
// current stream instead (warning once) until receivers catch up.
Descriptor share_storage(const c10::Storage& storage);

// Consumer side, in one call: maps the shared block on `device` (an explicit
// index, made current for the call), makes its current stream wait on the
// producer's event, claims the send, and views the storage with the sender's
// dtype, sizes, strides and storage offset (the caller validated them against
// the storage size).
at::Tensor rebuild_tensor(const Descriptor& d, int64_t device, c10::ScalarType dtype, c10::IntArrayRef sizes,
                          c10::IntArrayRef strides, int64_t storage_offset);

// Releases what receivers let go: limbo blocks, slots of dead receivers,
// unclaimed slots past their timeout, events of claimed sends. Returns the
// number of blocks returned to the allocator. Dead receivers are looked up
// at most every 50 ms unless `force`. share_storage() also runs it,
// amortized, when its limbo list grew (those blocks are not counted here).
int64_t ipc_collect(bool force = false);

struct SharingStats {
  int64_t inflight_events = 0;
  int64_t limbo_blocks = 0;
  int64_t live_slots = 0;       // sent slots not yet released (received or not)
  int64_t live_slots_self = 0;  // those of them this process received itself
  int64_t unreceived_slots = 0;  // those of them nobody received yet
  // Those of them other processes dropped, their release on its way (what an
  // exiting producer waits for; this process's own go with it).
  int64_t releasing_slots = 0;
  // Those of them other processes hold whose work queued on them had run
  // when they answered this process's latest exit fence request.
  int64_t fenced_slots = 0;
  // Tensors this process forwarded (received, then sent on) that nobody
  // received yet, with this process's event: a receiver opens that event, so
  // an exiting forwarder waits for them too.
  int64_t unreceived_forwards = 0;
  int64_t fallback_syncs = 0;
  int64_t out_of_events_sends = 0;  // fallback_syncs made because the device had no IPC event left
  int64_t no_ipc_event_sends = 0;   // fallback_syncs made because the NPU or runtime has no IPC events
  bool in_fallback = false;
  int64_t release_syncs = 0;  // releases that synchronized a stream: no fence could be recorded
  // Allocations that found the device short of memory and waited for
  // receivers' releases on their way instead of failing.
  int64_t out_of_memory_waits = 0;
};
SharingStats sharing_stats();
// An exiting forwarder's forwards nobody received: their receivers would
// open this process's event, so their slots in the original producers'
// tables are freed (the producers need not wait for their unclaimed
// timeout). Forwards without an event stay receivable. Returns how many.
int64_t withdraw_unreceived_forwards();
// An exiting producer asks the receivers of the tensors it shared to fence
// those they still hold: each receiver marks them once the work queued by
// then on their devices has run (SharingStats::fenced_slots).
void request_exit_fence();
// At the end of the exit wait: receivers that find this process gone do not
// warn about it (it warned itself).
void mark_exit_waited();
// SharingStats::out_of_events_sends alone (no pruning: cheap).
int64_t sharing_out_of_events_sends();

// The in-flight event budget (TORCH_NPU_IPC_MAX_INFLIGHT, default 1000).
int64_t inflight_budget();

// Tensor.record_stream for memory sharing took over: defers the memory's
// reuse until the work queued on `stream` so far ran. A block this process
// shared is no longer recognized by torch_npu's caching allocator (its
// DataPtr carries the plugin's deleter), so the record goes to the original
// allocation; memory received from another process is given back to its
// producer only after `stream` too finished with it. Returns false, doing
// nothing, for any other memory (the caller hands it to torch_npu).
bool record_shared_use(const c10::DataPtr& ptr, const c10_npu::NPUStream& stream);

}  // namespace torch_npu_ipc
