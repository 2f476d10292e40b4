#include "sharing.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <typeinfo>
#include <unordered_set>
#include <utility>
#include <vector>

#include "acl_table.h"
#include "env.h"
#include "event_manager.h"
#include "exit_fencer.h"
#include "external_stream.h"
#include "ipc_event.h"
#include "ipc_memory.h"
#include "npu_stream.h"
#include "own_pid.h"
#include "received.h"
#include "ref_table.h"
#include "releaser.h"
#include "stream_fences.h"
#include "torch_npu/csrc/core/NPUStorageImpl.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
#include "torch_npu/csrc/core/npu/NPUFunctions.h"

namespace torch_npu_ipc {
namespace {

using Clock = std::chrono::steady_clock;

// A full pass over the in-flight sends (timeouts, sends claimed out of
// order) runs every this many shares, or when the budget looks exhausted;
// in between, only finished sends at the front are dropped.
constexpr uint32_t kFullPruneEvery = 64;
// Dead receivers are looked for (a /proc read per holder pid) at most this often.
constexpr auto kDeadScanInterval = std::chrono::milliseconds(50);
// share_storage() collects limbo by itself once it holds this many blocks,
// then again when it doubled (amortized: never on every share).
constexpr size_t kAutoCollectMin = 64;
// How long an allocation that finds the device short of memory waits for
// receivers' releases on their way (see CollectOnOutOfMemory).
constexpr auto kOutOfMemoryWait = std::chrono::seconds(5);

std::chrono::seconds unclaimed_timeout() {
  static const auto t = std::chrono::seconds(env_int("TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S", 600, 1000000000));
  return t;
}

c10::Device npu(int64_t index) {
  return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
}

// Context of a producer storage that was shared at least once.
struct SentBlock {
  std::unique_ptr<ExportPin> pin;  // keeps the segment's export key open while shared
  c10::DataPtr original;
  uint64_t tag = 0;  // block id carried by every slot that references it, forwarders' included
  std::vector<Ref> refs;
  size_t nbytes = 0;  // the storage's
};

struct Inflight {
  Ref ref;
  std::shared_ptr<IpcEvent> event;
  Clock::time_point sent;

  // A forward's receiver still needs this process's event (the slot is in another process's table).
  bool is_forward(int32_t me) const { return event != nullptr && ref.table->owner_pid() != me; }
};

struct State {
  std::mutex mu;
  std::vector<std::shared_ptr<RefTable>> tables;
  std::deque<Inflight> inflight;
  int64_t inflight_events = 0;  // entries of `inflight` holding an event
  uint32_t shares_since_prune = 0;
  Clock::time_point last_dead_scan{};
  std::vector<std::unique_ptr<SentBlock>> limbo;
  size_t auto_collect_at = kAutoCollectMin;
  uint64_t next_tag = 1;
  int64_t fallback_syncs = 0;
  int64_t out_of_events_sends = 0;  // those of fallback_syncs the device had no IPC event for
  int64_t no_ipc_event_sends = 0;   // those of fallback_syncs made where IPC events are unsupported
  bool in_fallback = false;
  int64_t out_of_memory_waits = 0;  // see CollectOnOutOfMemory
  std::mutex events_mu;
  std::map<std::pair<std::string, int>, std::shared_ptr<IpcEvent>> opened;  // receiver's event cache
};

State& state() {
  // Never destroyed: deleters may run during interpreter shutdown.
  static State* s = std::make_unique<State>().release();
  return *s;
}

void sent_block_deleter(void* ctx);
void received_deleter(void* ctx);

// Drops the references receivers released: a storage shared over and over
// keeps a short list.
void prune_released(std::vector<Ref>& refs) {
  refs.erase(std::remove_if(refs.begin(), refs.end(), [](const Ref& r) { return !r.live(); }), refs.end());
}

// True while a receiver still references the block: one of our own sends,
// or a slot a forwarder took for it (those carry the block's tag).
bool block_live_locked(const State& s, SentBlock& b) {
  prune_released(b.refs);
  if (!b.refs.empty()) return true;
  for (const auto& t : s.tables) {
    if (t->tag_live(b.tag)) return true;
  }
  return false;
}

void sent_block_deleter(void* ctx) {
  std::unique_ptr<SentBlock> block(static_cast<SentBlock*>(ctx));
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (block_live_locked(s, *block)) s.limbo.push_back(std::move(block));
  // Otherwise the original DataPtr returns the block to the allocator here.
}

void received_deleter(void* ctx) {
  // Runs in a storage's (noexcept) destructor: nothing may escape.
  std::unique_ptr<Received> r(static_cast<Received*>(ctx));
  // Tells the producer this release is on its way (its exit waits for those
  // apart from tensors still held). Before the fencer lets go of it: a fence
  // answered in between then finds the slot Releasing and leaves it alone.
  r->ref.table->mark_releasing(r->ref.slot);
  unhold_for_exit_fence(r.get());
  try {
    auto device = r->import->device();
    release_after_use(std::move(r), c10_npu::getCurrentNPUStream(device));
  } catch (const std::exception& e) {
    // No thread or memory for the releaser: give the slot back now rather
    // than never (the producer may then reuse memory this stream still reads).
    LOG(ERROR) << "torch_npu_ipc: could not defer the release of a received tensor (" << e.what()
               << "); released at once";
    if (r != nullptr) {
      r->import.reset();
      r->ref.table->release(r->ref.slot);
    }
  }
}

}  // namespace

bool record_shared_use(const c10::DataPtr& ptr, const c10_npu::NPUStream& stream) {
  if (ptr.get_deleter() == &sent_block_deleter) {
    c10_npu::NPUCachingAllocator::recordStream(static_cast<SentBlock*>(ptr.get_context())->original, stream);
    return true;
  }
  if (ptr.get_deleter() == &received_deleter) {
    auto* r = static_cast<Received*>(ptr.get_context());
    std::lock_guard<std::mutex> lock(r->mu);
    add_stream(&r->used_on, stream);
    return true;
  }
  return false;
}

namespace {

constexpr const char* kNoLongerReceivable =
    "this shared tensor can no longer be received: it was received already (a descriptor is valid for one "
    "receiver), or the producer reclaimed it because nobody received it within TORCH_NPU_IPC_UNCLAIMED_TIMEOUT_S "
    "seconds";

// A forward's event is the forwarder's (its memory is the producer's): once
// the forwarder exited, its receiver cannot open it, and the forwarder's
// exit withdrew the slot after waiting for it (sharing.py).
bool forwarder_gone(const Descriptor& d, const RefTable& table) {
  return !d.event_handle.empty() && d.producer_pid != table.owner_pid() && !pid_running(d.producer_pid);
}

std::string forwarder_gone_message(const Descriptor& d) {
  return "the process that forwarded this tensor (pid " + std::to_string(d.producer_pid) +
         ") exited before it was received: the event that ordered it after that process's work went with it. "
         "Keep a forwarder running until its receivers got what it sent (its exit waits for them up to "
         "TORCH_NPU_IPC_EXIT_GRACE_MS, 2000 ms by default)";
}

// What a receiver must not take on a descriptor's word alone, hashed
// (FNV-1a): the memory key, its device, and how many bytes it maps. Stored
// with the slot by the sender, checked by the receiver before it imports, so
// a forged descriptor (checksum recomputed) cannot make it read past the
// memory the key maps.
uint64_t block_fingerprint(const Descriptor& d) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const unsigned char*>(p)[i];
      h *= 1099511628211ull;
    }
  };
  mix(d.mem_key.data(), d.mem_key.size());
  mix(&d.device, sizeof(d.device));
  mix(&d.block_size, sizeof(d.block_size));
  return h;
}

Ref take_slot_locked(State& s, uint64_t tag, uint64_t fingerprint) {
  SlotRef slot;
  for (auto& t : s.tables) {
    if (t->take(&slot, tag, fingerprint)) return Ref{t, slot};
  }
  s.tables.push_back(RefTable::create());
  TORCH_CHECK(s.tables.back()->take(&slot, tag, fingerprint),
              "torch_npu_ipc: a fresh reference table has no free slot");
  return Ref{s.tables.back(), slot};
}

// A send leaves the in-flight list once its receiver claimed the slot (its
// wait is issued) or the slot was released.
bool send_finished(const Inflight& f) { return f.ref.table->state(f.ref.slot) != SlotState::Sent; }

// Drops finished in-flight sends (their events return to the pool) and
// returns how many sends with an event are still waiting. Receivers mostly
// claim in send order, so the cheap part pops from the front; `full` also
// walks the whole list (sends claimed out of order, unclaimed timeouts).
int64_t prune_inflight_locked(State& s, bool full) {
  while (!s.inflight.empty() && send_finished(s.inflight.front())) {
    s.inflight_events -= s.inflight.front().event != nullptr;
    s.inflight.pop_front();
  }
  if (!full) return s.inflight_events;
  s.shares_since_prune = 0;
  const auto now = Clock::now();
  std::deque<Inflight> keep;
  for (auto& f : s.inflight) {
    if (send_finished(f)) continue;
    if (now - f.sent > unclaimed_timeout() && f.ref.table->reclaim_unclaimed(f.ref.slot)) {
      continue;  // never received: the block is free to go
    }
    keep.push_back(std::move(f));
  }
  s.inflight.swap(keep);
  s.inflight_events = 0;
  for (const auto& f : s.inflight) s.inflight_events += f.event != nullptr;
  return s.inflight_events;
}

// Blocks a collection let go. Their memory goes back to the allocator when
// the caller destroys them, after it let go of State::mu: the allocator's
// free may take the GIL or wait for torch_npu's task queue, whose threads may
// be waiting for State::mu (a storage's deleter takes it).
using Released = std::vector<std::unique_ptr<SentBlock>>;

// One pass: reclaim slots of dead receivers (at most every
// kDeadScanInterval unless `force`), then one scan of our tables for the
// block tags still referenced, then one walk of the limbo list.
int64_t collect_locked(State& s, bool force, Released* release) {
  const auto now = Clock::now();
  if (force || now - s.last_dead_scan >= kDeadScanInterval) {
    s.last_dead_scan = now;
    PidMemo memo;
    for (auto& t : s.tables) {
      t->reclaim_dead_holders(&memo);
      t->reclaim_unclaimed_forwards(unclaimed_timeout());  // forwarded descriptors nobody received
    }
  }
  prune_inflight_locked(s, /*full=*/true);
  if (s.limbo.empty()) return 0;
  // Every slot that keeps a block alive carries its tag: our own sends and
  // the slots forwarders took for it.
  std::unordered_set<uint64_t> live;
  for (const auto& t : s.tables) t->live_tags(&live);
  int64_t freed = 0;
  std::vector<std::unique_ptr<SentBlock>> keep;
  for (auto& b : s.limbo) {
    if (live.count(b->tag) != 0) {
      keep.push_back(std::move(b));
    } else {
      release->push_back(std::move(b));
      ++freed;
    }
  }
  s.limbo.swap(keep);
  return freed;
}

// A byte tensor over `ptr` (nbytes long) whose storage is torch_npu's own
// kind (an NPUStorageImpl with an ND format description, which its kernels
// read), made without allocating: an empty tensor's storage is pointed at
// the shared memory and described as at::empty({nbytes}, kByte) would be.
at::Tensor wrap_shared_bytes(c10::DataPtr ptr, int64_t nbytes) {
  const c10::Device device = ptr.device();
  at::Tensor t = at::empty({0}, at::TensorOptions().dtype(at::kByte).device(device));
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(ptr));
  impl->set_nbytes(static_cast<size_t>(nbytes));
  impl->set_resizable(false);
  // libtorch_npu does not export NPUStorageImpl's type_info, so neither
  // dynamic_cast nor typeid(NPUStorageImpl) links: the dynamic type's
  // (Itanium-mangled) name is read through the object's vtable instead.
  const char* type = typeid(*impl).name();
  TORCH_CHECK(std::strcmp(type, "N9torch_npu14NPUStorageImplE") == 0,
              "torch_npu_ipc: this torch_npu made an NPU storage of type ", type,
              " instead of torch_npu::NPUStorageImpl; shared tensors cannot be rebuilt (please report it)");
  torch_npu::NPUStorageDesc& desc = static_cast<torch_npu::NPUStorageImpl*>(impl)->npu_desc_;
  desc.base_sizes_ = {nbytes};
  desc.base_strides_ = {1};
  desc.storage_sizes_ = {nbytes};
  t.unsafeGetTensorImpl()->set_sizes_contiguous({nbytes});
  return t;
}

std::shared_ptr<IpcEvent> open_event(const std::string& handle, c10::DeviceIndex device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.events_mu);
  auto key = std::make_pair(handle, static_cast<int>(device));
  if (auto it = s.opened.find(key); it != s.opened.end()) return it->second;
  if (s.opened.size() >= 4096) s.opened.clear();  // bounded: producers pool their events
  auto e = IpcEvent::open(device, handle);
  s.opened.emplace(key, e);
  return e;
}

}  // namespace

int64_t inflight_budget() {
  static const int64_t budget = env_int("TORCH_NPU_IPC_MAX_INFLIGHT", 1000, 1000000000);
  return budget;
}

Descriptor share_storage(const c10::Storage& storage) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  const c10::Device dev = impl->device();
  TORCH_CHECK_VALUE(dev.type() == c10::DeviceType::PrivateUse1, "share_storage expects an NPU storage, got ", dev);
  TORCH_CHECK_VALUE(impl->nbytes() > 0, "an empty storage has nothing to share");
  Descriptor d;
  d.producer_pid = own_pid();
  d.storage_nbytes = impl->nbytes();
  State& s = state();
  Ref ref;
  const c10::DataPtr& current = impl->data_ptr();
  // Forwarding: the stream that waited for the original producer's send.
  std::optional<c10_npu::NPUStream> received_on;
  if (current.get_deleter() == &received_deleter) {
    // Forwarding a tensor this process received: describe the original block
    // and take a slot in one of the original producer's tables.
    auto* r = static_cast<Received*>(current.get_context());
    {
      std::lock_guard<std::mutex> lock(r->mu);
      received_on = r->used_on.front();
    }
    d = r->origin;
    d.producer_pid = own_pid();
    d.event_handle.clear();
    TORCH_CHECK(r->ref.table->owner_alive(), "cannot forward a tensor whose producer (pid ", r->ref.table->owner_pid(),
                ") has exited");
    SlotRef slot;
    const uint64_t tag = r->ref.table->tag(r->ref.slot);
    TORCH_CHECK(tag != 0, "cannot forward this tensor: its reference slot was reclaimed by the producer");
    const uint64_t fingerprint = block_fingerprint(d);
    std::shared_ptr<RefTable> table = r->ref.table;
    if (!table->take(&slot, tag, fingerprint)) table = r->ref.table->take_in_sibling(&slot, tag, fingerprint);
    TORCH_CHECK(table != nullptr, "cannot forward this tensor: every reference table of its producer (pid ",
                r->ref.table->owner_pid(), ") is full, ", RefTable::kSlots,
                " tensors each held by receivers or on their way (a producer adds tables only for its own sends): "
                "drop received tensors, or have the producer send it again");
    ref = Ref{table, slot};
  } else {
    ExportedBlock block = export_block(dev.index(), impl->mutable_data());
    Released released;  // destroyed after `lock` below
    d.device = dev.index();
    d.mem_key = block.key;
    d.block_size = block.size;
    d.storage_offset = static_cast<uint64_t>(static_cast<char*>(impl->mutable_data()) - static_cast<char*>(block.base));
    std::lock_guard<std::mutex> lock(s.mu);
    SentBlock* sent = nullptr;
    if (current.get_deleter() == &sent_block_deleter) {
      sent = static_cast<SentBlock*>(current.get_context());
    } else {
      // First share of this storage: park its allocation behind our deleter.
      auto owned = std::make_unique<SentBlock>();
      owned->tag = s.next_tag++;
      owned->pin = std::move(block.pin);
      owned->nbytes = impl->nbytes();
      // One swap: a thread launching work on this storage meanwhile never sees a null pointer.
      void* data = impl->mutable_data();
      sent = owned.get();
      owned->original = impl->set_data_ptr(c10::DataPtr(data, sent, &sent_block_deleter, dev));
      owned.release();  // now owned by the storage's DataPtr
    }
    ref = take_slot_locked(s, sent->tag, block_fingerprint(d));
    prune_released(sent->refs);
    sent->refs.push_back(ref);
    // A producer that never calls ipc_collect() (or rarely) still returns
    // blocks its receivers let go; amortized, the limbo list stays bounded.
    if (s.limbo.size() >= s.auto_collect_at) {
      collect_locked(s, /*force=*/false, &released);
      s.auto_collect_at = std::max(kAutoCollectMin, 2 * s.limbo.size());
    }
  }
  d.ref_table = ref.table->name();
  d.slot_index = ref.slot.index;
  d.slot_generation = ref.slot.generation;

  // Order the receiver after every write the producer launched so far.
  try {
    c10_npu::NPUStream stream = c10_npu::getCurrentNPUStream(dev.index());
    // A forward is also ordered after the original producer's writes, which
    // only the stream that received the tensor waited for: a forwarder that
    // received it with a side stream current and sends it from its default
    // stream (a Queue's feeder thread) has touched nothing on its current one.
    if (received_on.has_value() && *received_on != stream) {
      order_streams(launched(stream), launched(*received_on), dev.index());
    }
    // Where the NPU or its runtime has no IPC events, every send synchronizes
    // (as torch_npu's own sharing does there) rather than fail: Python warns
    // once with this reason (sharing.py, _note_fallback).
    const bool events_supported = ipc_events_unsupported_reason(dev.index()).empty();
    std::shared_ptr<IpcEvent> event;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      const bool full = s.inflight_events >= inflight_budget() || ++s.shares_since_prune >= kFullPruneEvery;
      const bool within_budget = prune_inflight_locked(s, full) < inflight_budget();
      if (!events_supported) {
        ++s.no_ipc_event_sends;
      } else if (within_budget) {
        std::string exhausted;
        event = EventManager::get().try_acquire(dev.index(), &exhausted);
        // No IPC event left on the device: synchronize like a send over the
        // budget rather than fail it (a Queue's feeder thread would print the
        // error and drop the message).
        if (event == nullptr) ++s.out_of_events_sends;
      }
      s.in_fallback = event == nullptr;
      s.fallback_syncs += event == nullptr;
      s.inflight.push_back(Inflight{ref, event, Clock::now()});
      s.inflight_events += event != nullptr;
    }
    if (event != nullptr) {
      event->record(stream);
      d.event_handle = event->handle();
    } else {
      stream.synchronize();  // no events here, over budget or out of events: the receiver needs no wait
    }
  } catch (...) {
    // No descriptor leaves: free the slot, or it would keep the block
    // referenced (and the producer's memory held) until the process exits.
    ref.table->reclaim_unclaimed(ref.slot);
    throw;
  }
  return d;
}

namespace {

// The device a descriptor is imported on, checked against the devices this
// process has. `device` is always explicit: Python resolves the default (the
// sender's device) and names a missing one itself.
c10::DeviceIndex import_target(const Descriptor& d, int64_t device) {
  TORCH_CHECK_VALUE(d.device >= 0 && d.device <= std::numeric_limits<c10::DeviceIndex>::max(),
                    "malformed tensor descriptor: device ", d.device);
  const int64_t visible = c10_npu::device_count();
  TORCH_CHECK_VALUE(device >= 0 && device < visible, "cannot import on npu:", device, ": this process sees ", visible,
                    " NPUs");
  return static_cast<c10::DeviceIndex>(device);
}

// A 1-D uint8 tensor on `target` (validated by import_target) viewing the
// whole shared storage.
at::Tensor rebuild_storage(const Descriptor& d, c10::DeviceIndex target) {
  TORCH_CHECK_VALUE(d.storage_offset <= d.block_size && d.storage_nbytes <= d.block_size - d.storage_offset,
                    "descriptor's storage range lies outside its shared block");
  TORCH_CHECK_VALUE(d.event_handle.empty() || d.event_handle.size() == kIpcEventHandleSize,
                    "descriptor's event handle has the wrong size");
  auto table = RefTable::open(d.ref_table);
  // A receiver that still maps the table (it holds other tensors of that
  // producer) opens it from its cache even after the producer exited.
  TORCH_CHECK(table->owner_alive(), "the producer of this shared tensor (pid ", table->owner_pid(),
              ") has exited: its memory is gone");
  SlotRef slot{d.slot_index, d.slot_generation};
  TORCH_CHECK_VALUE(slot.index < RefTable::kSlots, "descriptor's reference slot is out of range");
  uint64_t sent_fingerprint = 0;
  if (!table->fingerprint(slot, &sent_fingerprint)) {
    TORCH_CHECK(!forwarder_gone(d, *table), forwarder_gone_message(d));
    TORCH_CHECK(false, kNoLongerReceivable);
  }
  TORCH_CHECK_VALUE(sent_fingerprint == block_fingerprint(d),
                    "forged tensor descriptor: its memory key, device or block size differ from what the producer "
                    "sent with this reference slot");
  std::shared_ptr<Import> import;
  try {
    import = Import::get(d.mem_key, target, static_cast<c10::DeviceIndex>(d.device));
    if (!d.event_handle.empty()) {
      // Always wait on THIS send's event, even when the block was cached. The
      // wait is issued BEFORE the slot is claimed: the producer returns the
      // pooled event for reuse once the slot leaves Sent, and a wait issued
      // after a re-record would bind to that later, unrelated record.
      open_event(d.event_handle, target)->wait(c10_npu::getCurrentNPUStream(target));
    }
  } catch (const c10::Error&) {
    // The cheap liveness check above misses a producer in the middle of
    // exiting; name that cause rather than the runtime's error.
    TORCH_CHECK(table->owner_alive_now(), "the producer of this shared tensor (pid ", table->owner_pid(),
                ") has exited: its memory is gone");
    if (forwarder_gone(d, *table)) {
      // Gone without its exit (killed): nobody can receive this descriptor
      // any more, so free the producer's slot now rather than at its
      // unclaimed timeout.
      if (table->claim(slot)) table->release(slot);
      TORCH_CHECK(false, forwarder_gone_message(d));
    }
    throw;
  }
  TORCH_CHECK(table->claim(slot), kNoLongerReceivable);
  auto received = std::make_unique<Received>();
  received->ref = Ref{table, slot};
  received->import = import;
  received->origin = d;
  // The stream that waited for the producer plays the part of the allocation
  // stream: work the receiver queues on it counts as a use even when the
  // tensor is dropped with another stream current (fenced at the drop too).
  received->used_on.push_back(c10_npu::getCurrentNPUStream(target));
  void* data = static_cast<char*>(import->ptr()) + d.storage_offset;
  Received* r = received.get();
  c10::DataPtr ptr(data, received.release(), &received_deleter, npu(target));
  // Should this throw, `ptr`'s deleter takes the tensor out again. A tensor
  // received from this process itself needs no fence: its exit does not wait for it.
  if (table->owner_pid() != own_pid()) hold_for_exit_fence(r);
  return wrap_shared_bytes(std::move(ptr), static_cast<int64_t>(d.storage_nbytes));
}

}  // namespace

at::Tensor rebuild_tensor(const Descriptor& d, int64_t device, c10::ScalarType dtype, c10::IntArrayRef sizes,
                          c10::IntArrayRef strides, int64_t storage_offset) {
  const c10::DeviceIndex target = import_target(d, device);
  // The target device current for the rebuild (its context and streams are
  // created on first use); restored on return.
  c10::DeviceGuard guard(npu(target));
  at::Tensor raw = rebuild_storage(d, target);
  at::Tensor out = at::empty({0}, raw.options().dtype(dtype));
  out.set_(raw.storage(), storage_offset, sizes, strides);
  return out;
}

int64_t ipc_collect(bool force) {
  State& s = state();
  Released released;  // destroyed after `lock`
  std::lock_guard<std::mutex> lock(s.mu);
  return collect_locked(s, force, &released);
}

namespace {

// Bytes of the limbo blocks on `device` that only releases on their way
// keep (every live slot of theirs is Releasing): they come back once the
// receivers' streams ran past the drops.
size_t releasing_bytes_locked(const State& s, c10::DeviceIndex device) {
  std::unordered_set<uint64_t> held, releasing;
  for (const auto& t : s.tables) t->live_tags(&held, &releasing);
  size_t bytes = 0;
  for (const auto& b : s.limbo) {
    const bool here = b->original.device().index() == device;
    if (here && releasing.count(b->tag) != 0 && held.count(b->tag) == 0) bytes += b->nbytes;
  }
  return bytes;
}

// torch_npu's caching allocator runs its free-memory callbacks when no cached
// block fits a request, before it asks the device for more, and searches
// again when one freed something (torch.cuda registers its IPC collect the
// same way). A producer that drops what it sent, `q.put(t); del t`, leaves
// blocks in limbo until receivers let go; without this they stay there, below
// the automatic collection's block count, while the device runs out.
//
// A receiver's release follows the producer's own device progress (its
// stream waits on the producer's later sends before it reaches the drop), so
// a producer running ahead of its device holds its device backlog's worth of
// blocks. When the device has less memory left than those releases on their
// way would return, this waits for them (up to kOutOfMemoryWait, returning at
// the first block freed). Not told the request's size, it takes that as the
// sign memory ran short (docs/sharing.md lists where the proxy misses). It
// runs with the allocator's lock held: a
// thread holding the sharing lock may be waiting for that allocator, so it
// never waits for the sharing lock (tries it instead).
class CollectOnOutOfMemory final : public c10_npu::NPUCachingAllocator::FreeMemoryCallback {
 public:
  bool Execute() override {
    State& s = state();
    Released released;  // freed (through the allocator, re-entered) after `lock`
    std::unique_lock<std::mutex> lock(s.mu, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (collect_locked(s, /*force=*/true, &released) > 0) return true;
    const AclTable& a = acl();
    int32_t device = -1;
    size_t free = 0;
    size_t total = 0;
    if (a.GetDevice == nullptr || a.GetMemInfo == nullptr || handled(a.GetDevice(&device)) != ACL_SUCCESS) return false;
    const size_t coming = releasing_bytes_locked(s, static_cast<c10::DeviceIndex>(device));
    if (coming == 0 || handled(a.GetMemInfo(ACL_HBM_MEM, &free, &total)) != ACL_SUCCESS || free >= coming) {
      return false;
    }
    ++s.out_of_memory_waits;
    const auto deadline = Clock::now() + kOutOfMemoryWait;
    while (Clock::now() < deadline) {
      if (lock.owns_lock()) lock.unlock();  // a turn may have found the lock taken
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!lock.try_lock()) continue;
      if (collect_locked(s, /*force=*/false, &released) > 0) return true;
      if (releasing_bytes_locked(s, static_cast<c10::DeviceIndex>(device)) == 0) return false;
    }
    return false;
  }
};

}  // namespace

int64_t withdraw_unreceived_forwards() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int32_t me = own_pid();
  int64_t withdrawn = 0;
  for (const auto& f : s.inflight) {
    withdrawn += f.is_forward(me) && f.ref.table->reclaim_unclaimed(f.ref.slot);
  }
  prune_inflight_locked(s, /*full=*/true);
  return withdrawn;
}

int64_t sharing_out_of_events_sends() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.out_of_events_sends;
}

void request_exit_fence() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int32_t me = own_pid();
  for (const auto& t : s.tables) {
    if (t->owner_pid() == me) t->request_fence();  // a forked child's inherited tables are its parent's
  }
}

void mark_exit_waited() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int32_t me = own_pid();
  for (const auto& t : s.tables) {
    if (t->owner_pid() == me) t->mark_exit_waited();
  }
}

SharingStats sharing_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  SharingStats st;
  st.inflight_events = prune_inflight_locked(s, /*full=*/true);
  st.limbo_blocks = static_cast<int64_t>(s.limbo.size());
  const auto me = own_pid();
  for (const auto& t : s.tables) {
    const SlotCounts c = t->counts(me);
    st.live_slots += c.sent + c.claimed + c.releasing;
    st.live_slots_self += c.claimed_self + c.releasing_self;
    st.unreceived_slots += c.sent;
    st.releasing_slots += c.releasing - c.releasing_self;
    st.fenced_slots += c.fenced;
  }
  for (const auto& f : s.inflight) {  // pruned above: each is still Sent
    st.unreceived_forwards += f.is_forward(me);
  }
  st.fallback_syncs = s.fallback_syncs;
  st.out_of_events_sends = s.out_of_events_sends;
  st.no_ipc_event_sends = s.no_ipc_event_sends;
  st.in_fallback = s.in_fallback;
  st.release_syncs = release_syncs();
  st.out_of_memory_waits = s.out_of_memory_waits;
  return st;
}

}  // namespace torch_npu_ipc

// torch_npu's registration macro names the registry's types unqualified.
namespace c10_npu::NPUCachingAllocator {
REGISTER_FREE_MEMORY_CALLBACK("torch_npu_ipc_collect", torch_npu_ipc::CollectOnOutOfMemory)
}  // namespace c10_npu::NPUCachingAllocator
