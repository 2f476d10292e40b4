#include "ref_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "own_pid.h"

namespace torch_npu_ipc {
namespace {

constexpr uint32_t kMagic = 0x54524634;  // "TRF4": layout with holder start times, fingerprints and exit fences
constexpr char kPrefix[] = "torch_npu_ipc.";
// Tables a receiver keeps mapped after its last tensor of them died.
constexpr size_t kRecentTables = 16;
// Without pidfd_open, an owner found alive in /proc is not looked up again
// for this long.
constexpr auto kProcCheckInterval = std::chrono::milliseconds(50);

struct Header {
  uint32_t magic;
  uint32_t slots;
  int32_t owner_pid;
  uint32_t next_hint;
  uint32_t fence_request;  // the owner's latest exit fence request (0: none)
  uint32_t exit_waited;    // 1 once the owner's exit wait ended (it warned about what was still held)
};

// Header, then five words per slot, array by array: the state word; the
// block tag; the holder word, (generation << 32) | low 32 bits of the
// claiming process's start time, written by the receiver right after its
// claim; the fingerprint of what the send describes; the fence word,
// (generation << 32) | the fence request its receiver answered.
constexpr size_t kBytes = sizeof(Header) + 5 * sizeof(std::atomic<uint64_t>) * RefTable::kSlots;
static_assert(sizeof(Header) % sizeof(uint64_t) == 0, "slot words must stay 8-byte aligned");

uint64_t pack_fence(uint32_t gen, uint32_t request) { return (uint64_t{gen} << 32) | request; }

uint64_t pack(uint32_t gen, SlotState st, int32_t pid) {
  return (uint64_t{gen} << 32) | (uint64_t(static_cast<uint32_t>(st)) << 30) | (uint32_t(pid) & 0x3FFFFFFFu);
}
uint32_t gen_of(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
SlotState state_of(uint64_t w) { return static_cast<SlotState>((w >> 30) & 0x3u); }
int32_t pid_of(uint64_t w) { return static_cast<int32_t>(w & 0x3FFFFFFFu); }

// Start time of a process (clock ticks since boot), or 0 when it is gone.
uint64_t start_time(int32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  char state = 0;
  rest >> state;
  if (state == 'Z' || state == 'X') return 0;  // zombie: dead for us
  for (int i = 4; i < 22 && rest >> field; ++i) {
  }
  uint64_t st = 0;
  rest >> st;
  return st;
}

// This process's start time (recomputed in a forked child).
uint64_t my_start_time() {
  static std::atomic<int32_t> pid{0};
  static std::atomic<uint64_t> start{0};
  const int32_t me = own_pid();
  if (pid.load() != me) {
    start.store(start_time(me));
    pid.store(me);
  }
  return start.load();
}

uint64_t pack_holder(uint32_t gen, uint64_t start) { return (uint64_t{gen} << 32) | (start & 0xFFFFFFFFu); }
uint32_t holder_gen(uint64_t h) { return static_cast<uint32_t>(h >> 32); }
uint32_t holder_start(uint64_t h) { return static_cast<uint32_t>(h); }

std::string pidns() {
  char buf[64] = {};
  ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "pid:[0]";
  std::string digits;
  for (char c : s) {
    if (c >= '0' && c <= '9') digits.push_back(c);
  }
  return digits;
}

// A pidfd for `pid` (-1 when pidfd_open is unavailable or the pid is gone).
int pidfd_open(int32_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // close-on-exec by default
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

// True once the process behind `pidfd` exited (it turns readable then).
bool pidfd_exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  int n = poll(&p, 1, 0);
  return n > 0;
}

// Start time encoded in a table name (torch_npu_ipc.<ns>.<pid>.<start>.<seq>), 0 if unknown.
uint64_t start_of_name(const std::string& name) {
  const std::string prefix = "/" + std::string(kPrefix);
  if (name.compare(0, prefix.size(), prefix) != 0) return 0;
  unsigned long ns = 0, pid = 0, st = 0, seq = 0;
  if (std::sscanf(name.c_str() + prefix.size(), "%lu.%lu.%lu.%lu", &ns, &pid, &st, &seq) != 4) return 0;
  return st;
}

struct TableCache {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<RefTable>> by_name;
  // The most recently opened tables stay mapped (least recent first).
  std::deque<std::shared_ptr<RefTable>> recent;
};

TableCache& cache() {
  // Never destroyed: receivers' deleters may run during interpreter shutdown.
  static TableCache* c = std::make_unique<TableCache>().release();
  return *c;
}

void touch_locked(TableCache& c, const std::shared_ptr<RefTable>& t) {
  if (!c.recent.empty() && c.recent.back() == t) return;
  auto it = std::find(c.recent.begin(), c.recent.end(), t);
  if (it != c.recent.end()) c.recent.erase(it);
  c.recent.push_back(t);
  if (c.recent.size() > kRecentTables) c.recent.pop_front();
}

// Names of the tables this process created. The tables themselves are never
// destroyed (the sharing state outlives interpreter shutdown), so their names
// are unlinked here at exit: receivers keep their mappings, and a receiver
// that opens one later gets the clear "producer exited" error. A forked
// child inherits this object but unlinks nothing of its parent's.
class OwnedNames {
 public:
  void add(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    names_.push_back(name);
  }
  ~OwnedNames() {
    if (own_pid() != pid_) return;
    // A daemon thread may still be creating a table while the process exits.
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& n : names_) shm_unlink(n.c_str());
  }

 private:
  std::mutex mu_;
  int32_t pid_ = own_pid();
  std::vector<std::string> names_;
};

OwnedNames& owned_names() {
  static OwnedNames names;
  return names;
}

}  // namespace

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

void remove_stale_tables() {
  const std::string mine = std::string(kPrefix) + pidns() + ".";
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(mine, 0) != 0) continue;
    // torch_npu_ipc.<ns>.<pid>.<start>.<seq>
    unsigned long pid = 0, st = 0, seq = 0;
    if (std::sscanf(n.c_str() + mine.size(), "%lu.%lu.%lu", &pid, &st, &seq) != 3) continue;
    if (start_time(static_cast<int32_t>(pid)) != st) shm_unlink(("/" + n).c_str());
  }
  closedir(d);
}

std::shared_ptr<RefTable> RefTable::create() {
  static std::atomic<uint32_t> seq{0};
  static std::once_flag cleaned;
  std::call_once(cleaned, remove_stale_tables);
  const int32_t pid = own_pid();
  std::string name = "/" + std::string(kPrefix) + pidns() + "." + std::to_string(pid) + "." +
                     std::to_string(start_time(pid)) + "." + std::to_string(seq++);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  TORCH_CHECK(fd >= 0, "torch_npu_ipc: cannot create shared reference table ", name, ": ", std::strerror(errno));
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(kBytes)) == 0) {
    p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    TORCH_CHECK(false, "torch_npu_ipc: cannot map shared reference table: ", std::strerror(err));
  }
  auto* h = static_cast<Header*>(p);
  h->slots = kSlots;
  h->owner_pid = pid;
  h->magic = kMagic;
  owned_names().add(name);
  auto t = std::make_shared<RefTable>(Key{}, name, p, true);
  std::lock_guard<std::mutex> lock(cache().mu);
  cache().by_name[name] = t;
  return t;
}

std::shared_ptr<RefTable> RefTable::open(const std::string& name) {
  TableCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (auto it = c.by_name.find(name); it != c.by_name.end()) {
    if (auto t = it->second.lock()) {
      if (!t->owner_) touch_locked(c, t);
      return t;
    }
  }
  TORCH_CHECK_VALUE(name.size() > 1 && name.size() < 200 && name[0] == '/' && name.find('/', 1) == std::string::npos &&
                        name.compare(1, sizeof(kPrefix) - 1, kPrefix) == 0,
                    "not a torch_npu_ipc reference table name");
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  TORCH_CHECK(fd >= 0, "the producer's shared reference table ", name,
              " is gone: the producing process exited or released the tensor");
  struct stat st {};
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == kBytes) {
    p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  TORCH_CHECK(p != MAP_FAILED, "the shared reference table ", name, " is not a torch_npu_ipc table");
  if (static_cast<Header*>(p)->magic != kMagic || static_cast<Header*>(p)->slots != kSlots) {
    munmap(p, kBytes);
    TORCH_CHECK(false, "the shared reference table ", name, " is not a torch_npu_ipc table");
  }
  auto t = std::make_shared<RefTable>(Key{}, name, p, false);
  // Drop names whose tables are gone, so the map stays as small as the cache.
  for (auto it = c.by_name.begin(); it != c.by_name.end();) {
    it = it->second.expired() ? c.by_name.erase(it) : std::next(it);
  }
  c.by_name[name] = t;
  touch_locked(c, t);
  return t;
}

std::shared_ptr<RefTable> RefTable::take_in_sibling(SlotRef* out, uint64_t tag, uint64_t fingerprint) const {
  // <prefix><ns>.<pid>.<start>.<seq>: siblings differ in <seq> only.
  const size_t dot = name_.rfind('.');
  unsigned long own_seq = 0;
  if (dot == std::string::npos || std::sscanf(name_.c_str() + dot + 1, "%lu", &own_seq) != 1) return nullptr;
  const std::string stem = name_.substr(0, dot + 1);
  constexpr unsigned long kMaxTables = 4096;  // 16 M slots: far beyond any producer's
  for (unsigned long seq = 0; seq < kMaxTables; ++seq) {
    if (seq == own_seq) continue;
    std::shared_ptr<RefTable> t;
    try {
      t = open(stem + std::to_string(seq));
    } catch (const c10::Error&) {
      // A forked producer's first table is not number 0; after this
      // table's number, the first missing one ends the owner's tables.
      if (seq > own_seq) break;
      continue;
    }
    if (t->take(out, tag, fingerprint)) return t;
  }
  return nullptr;
}

RefTable::RefTable(Key, std::string name, void* base, bool owner)
    : name_(std::move(name)), base_(base), owner_(owner), owner_start_(start_of_name(name_)) {}

RefTable::~RefTable() {
  munmap(base_, kBytes);
  if (owner_) shm_unlink(name_.c_str());
}

std::atomic<uint64_t>* RefTable::word(uint32_t index) const {
  auto* slots = reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + sizeof(Header));
  return &slots[index];
}

std::atomic<uint64_t>* RefTable::tag_word(uint32_t index) const { return word(kSlots + index); }

std::atomic<uint64_t>* RefTable::holder_word(uint32_t index) const { return word(2 * kSlots + index); }

std::atomic<uint64_t>* RefTable::fingerprint_word(uint32_t index) const { return word(3 * kSlots + index); }

std::atomic<uint64_t>* RefTable::fence_word(uint32_t index) const { return word(4 * kSlots + index); }

int32_t RefTable::owner_pid() const { return static_cast<Header*>(base_)->owner_pid; }

bool RefTable::owner_alive() const {
  const int32_t pid = owner_pid();
  if (owner_ || pid == own_pid()) return true;
  std::lock_guard<std::mutex> lock(alive_mu_);
  if (owner_dead_) return false;
  if (!pidfd_tried_) {
    pidfd_tried_ = true;
    // Open the pidfd first, then check the start time: if it still matches
    // the table's name, the pidfd names the owner and not a later process
    // that reused its pid.
    UniqueFd fd(pid > 0 ? pidfd_open(pid) : -1);
    if (!owner_in_proc()) {
      owner_dead_ = true;
      return false;
    }
    pidfd_ = std::move(fd);
    last_proc_check_ = std::chrono::steady_clock::now();
  }
  if (pidfd_.get() >= 0) {
    owner_dead_ = pidfd_exited(pidfd_.get());
    return !owner_dead_;
  }
  // No pidfd (an old kernel, or a sandbox refusing the syscall): /proc, rate-limited.
  const auto now = std::chrono::steady_clock::now();
  if (now - last_proc_check_ < kProcCheckInterval) return true;
  last_proc_check_ = now;
  owner_dead_ = !owner_in_proc();
  return !owner_dead_;
}

bool RefTable::owner_in_proc() const {
  // start_time() is 0 for a pid that does not exist or is a zombie.
  const int32_t pid = owner_pid();
  const uint64_t st = pid > 0 ? start_time(pid) : 0;
  return st != 0 && (owner_start_ == 0 || st == owner_start_);
}

bool RefTable::take(SlotRef* out, uint64_t tag, uint64_t fingerprint) {
  auto* h = static_cast<Header*>(base_);
  const int32_t me = own_pid();
  uint32_t start = __atomic_load_n(&h->next_hint, __ATOMIC_RELAXED);
  for (uint32_t k = 0; k < kSlots; ++k) {
    uint32_t i = (start + k) % kSlots;
    std::atomic<uint64_t>* w = word(i);
    uint64_t cur = w->load();
    if (state_of(cur) != SlotState::Free) continue;
    uint32_t gen = gen_of(cur) + 1;
    if (w->compare_exchange_strong(cur, pack(gen, SlotState::Sent, me))) {
      // Published after the slot turned Sent: a reader may see the previous
      // tag for a moment, which only keeps a block in limbo a little longer
      // (a forwarder's own slot, tagged alike, is live throughout).
      tag_word(i)->store(tag);
      fingerprint_word(i)->store(fingerprint);
      __atomic_store_n(&h->next_hint, (i + 1) % kSlots, __ATOMIC_RELAXED);
      *out = SlotRef{i, gen};
      return true;
    }
  }
  return false;
}

bool RefTable::claim(const SlotRef& ref) {
  if (ref.index >= kSlots) return false;
  std::atomic<uint64_t>* w = word(ref.index);
  uint64_t cur = w->load();
  if (gen_of(cur) != ref.generation || state_of(cur) != SlotState::Sent) return false;
  if (!w->compare_exchange_strong(cur, pack(ref.generation, SlotState::Claimed, own_pid()))) {
    return false;
  }
  // Tells a later process with our pid apart from us. Until it is written
  // the owner judges the holder by pid alone (never wrongly dead); the
  // generation makes a word left by an earlier holder of the slot void.
  holder_word(ref.index)->store(pack_holder(ref.generation, my_start_time()));
  return true;
}

void RefTable::mark_releasing(const SlotRef& ref) {
  if (ref.index >= kSlots) return;
  std::atomic<uint64_t>* w = word(ref.index);
  uint64_t cur = w->load();
  while (gen_of(cur) == ref.generation && state_of(cur) == SlotState::Claimed) {
    if (w->compare_exchange_weak(cur, pack(ref.generation, SlotState::Releasing, pid_of(cur)))) return;
  }
}

void RefTable::request_fence() {
  auto* h = static_cast<Header*>(base_);
  if (__atomic_add_fetch(&h->fence_request, 1, __ATOMIC_SEQ_CST) == 0) {
    __atomic_add_fetch(&h->fence_request, 1, __ATOMIC_SEQ_CST);  // 0 means none
  }
}

void RefTable::mark_exit_waited() { __atomic_store_n(&static_cast<Header*>(base_)->exit_waited, 1u, __ATOMIC_RELEASE); }

bool RefTable::exit_waited() const {
  return __atomic_load_n(&static_cast<Header*>(base_)->exit_waited, __ATOMIC_ACQUIRE) != 0;
}

uint32_t RefTable::fence_request() const {
  return __atomic_load_n(&static_cast<Header*>(base_)->fence_request, __ATOMIC_ACQUIRE);
}

void RefTable::mark_fenced(const SlotRef& ref, uint32_t request) {
  if (ref.index >= kSlots || state(ref) != SlotState::Claimed) return;
  // Should the slot be released and taken again meanwhile, the word names
  // the old generation and counts for nothing.
  fence_word(ref.index)->store(pack_fence(ref.generation, request));
}

void RefTable::release(const SlotRef& ref) {
  if (ref.index >= kSlots) return;
  std::atomic<uint64_t>* w = word(ref.index);
  uint64_t cur = w->load();
  while (gen_of(cur) == ref.generation && state_of(cur) != SlotState::Free) {
    if (w->compare_exchange_weak(cur, pack(ref.generation, SlotState::Free, 0))) return;
  }
}

bool RefTable::reclaim_unclaimed(const SlotRef& ref) {
  if (ref.index >= kSlots) return false;
  std::atomic<uint64_t>* w = word(ref.index);
  uint64_t cur = w->load();
  while (gen_of(cur) == ref.generation && state_of(cur) == SlotState::Sent) {
    if (w->compare_exchange_weak(cur, pack(ref.generation, SlotState::Free, 0))) return true;
  }
  return false;
}

uint32_t RefTable::reclaim_unclaimed_forwards(std::chrono::steady_clock::duration timeout) {
  const int32_t me = own_pid();
  const auto now = std::chrono::steady_clock::now();
  std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> still;
  uint32_t n = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint64_t cur = word(i)->load();
    if (state_of(cur) != SlotState::Sent || pid_of(cur) == me) continue;
    const uint64_t key = (static_cast<uint64_t>(i) << 32) | gen_of(cur);
    auto it = forward_seen_.find(key);
    const auto first = it == forward_seen_.end() ? now : it->second;
    if (now - first > timeout && reclaim_unclaimed(SlotRef{i, gen_of(cur)})) {
      ++n;
      continue;
    }
    still.emplace(key, first);
  }
  forward_seen_.swap(still);
  return n;
}

bool RefTable::live(const SlotRef& ref) const {
  uint64_t cur = word(ref.index)->load();
  return gen_of(cur) == ref.generation && state_of(cur) != SlotState::Free;
}

SlotState RefTable::state(const SlotRef& ref) const {
  uint64_t cur = word(ref.index)->load();
  return gen_of(cur) == ref.generation ? state_of(cur) : SlotState::Free;
}

uint64_t RefTable::tag(const SlotRef& ref) const {
  if (ref.index >= kSlots) return 0;
  uint64_t t = tag_word(ref.index)->load();
  return gen_of(word(ref.index)->load()) == ref.generation ? t : 0;
}

bool RefTable::fingerprint(const SlotRef& ref, uint64_t* out) const {
  if (ref.index >= kSlots) return false;
  const uint64_t fp = fingerprint_word(ref.index)->load();
  if (state(ref) != SlotState::Sent) return false;
  *out = fp;
  return true;
}

bool RefTable::tag_live(uint64_t tag) const {
  for (uint32_t i = 0; i < kSlots; ++i) {
    if (state_of(word(i)->load()) != SlotState::Free && tag_word(i)->load() == tag) return true;
  }
  return false;
}

bool RefTable::owner_alive_now() const {
  if (!owner_alive()) return false;
  if (owner_ || owner_pid() == own_pid()) return true;
  return owner_in_proc();
}

void RefTable::live_tags(std::unordered_set<uint64_t>* out, std::unordered_set<uint64_t>* releasing) const {
  for (uint32_t i = 0; i < kSlots; ++i) {
    const SlotState st = state_of(word(i)->load(std::memory_order_acquire));
    if (st == SlotState::Free) continue;
    (st == SlotState::Releasing && releasing != nullptr ? releasing : out)->insert(tag_word(i)->load());
  }
}

SlotCounts RefTable::counts(int32_t self) const {
  SlotCounts c;
  const uint32_t request = fence_request();
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint64_t cur = word(i)->load();
    switch (state_of(cur)) {
      case SlotState::Free:
        break;
      case SlotState::Sent:
        ++c.sent;
        break;
      case SlotState::Claimed:
        ++c.claimed;
        if (pid_of(cur) == self) {
          ++c.claimed_self;
        } else if (request != 0 && fence_word(i)->load() == pack_fence(gen_of(cur), request)) {
          ++c.fenced;
        }
        break;
      case SlotState::Releasing:
        ++c.releasing;
        c.releasing_self += pid_of(cur) == self;
        break;
    }
  }
  return c;
}

uint32_t RefTable::reclaim_dead_holders(PidMemo* memo) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    uint64_t cur = word(i)->load();
    if (state_of(cur) != SlotState::Claimed && state_of(cur) != SlotState::Releasing) continue;
    const int32_t pid = pid_of(cur);
    auto it = memo->find(pid);
    if (it == memo->end()) {
      const bool exists = pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
      it = memo->emplace(pid, exists ? start_time(pid) : 0).first;
    }
    const uint64_t running = it->second;  // start time of the process now using the pid, 0: none
    const uint64_t holder = holder_word(i)->load();
    const bool recorded = holder_gen(holder) == gen_of(cur);
    // Dead: nothing runs under the pid, or what runs started at another
    // time than the claimer (the pid was reused).
    if (running == 0 || (recorded && static_cast<uint32_t>(running) != holder_start(holder))) {
      release(SlotRef{i, gen_of(cur)});
      ++n;
    }
  }
  return n;
}

bool pid_running(int32_t pid) { return pid > 0 && start_time(pid) != 0; }

}  // namespace torch_npu_ipc
