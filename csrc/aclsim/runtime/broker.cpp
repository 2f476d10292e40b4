#include "broker.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "no_destructor.h"
#include "process.h"

namespace aclsim {
namespace broker {
namespace {

constexpr char kRequestMagic[8] = {'A', 'C', 'L', 'S', 'I', 'M', 'R', 'Q'};

struct Request {
  char magic[8];
  uint32_t kind;
  uint32_t reserved;
  uint64_t id;
  uint64_t nonce;
};

struct Reply {
  int32_t status;
  int32_t device;
  uint64_t offset;
  uint64_t size;
  char message[200];
};

// A process-wide table of exports plus the listener thread serving it.
class Server {
 public:
  aclError publish(Export e, Ticket* out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aclError rc = start_locked(); rc != ACL_SUCCESS) return rc;
    uint64_t id = ++next_id_;
    uint64_t nonce = rng_();
    entries_.emplace(id, Entry{std::move(e), nonce});
    *out = Ticket{own_pid(), id, nonce};
    return ACL_SUCCESS;
  }

  bool retract(const Ticket& t) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = find_locked(t);
    if (it == entries_.end()) return false;
    entries_.erase(it);
    return true;
  }

  aclError allow_pids(const Ticket& t, const int32_t* pids, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = find_locked(t);
    if (it == entries_.end()) return fail(ACL_ERROR_RT_PARAM_INVALID, "unknown IPC key (not exported by this process)");
    it->second.e.allowed_pids.insert(it->second.e.allowed_pids.end(), pids, pids + n);
    return ACL_SUCCESS;
  }

  // After fork() the child has no listener thread and exports nothing.
  void reset_in_child() {
    new (&mu_) std::mutex();
    entries_.clear();
    listener_fd_ = -1;
    started_ = false;
  }

 private:
  struct Entry {
    Export e;
    uint64_t nonce;
  };
  using Map = std::unordered_map<uint64_t, Entry>;

  Map::iterator find_locked(const Ticket& t) {
    if (t.pid != own_pid()) return entries_.end();
    auto it = entries_.find(t.id);
    return it != entries_.end() && it->second.nonce == t.nonce ? it : entries_.end();
  }

  aclError start_locked() {
    if (started_) return ACL_SUCCESS;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    socklen_t len = 0;
    fill_address(own_pid(), &addr, &len);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 64) != 0) {
      int e = errno;
      if (fd >= 0) close(fd);
      return fail(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, std::string("IPC listener: ") + std::strerror(e));
    }
    listener_fd_ = fd;
    started_ = true;
    std::thread([this, fd] { serve(fd); }).detach();
    return ACL_SUCCESS;
  }

  void serve(int listener) {
    for (;;) {
      int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      handle(conn);
      close(conn);
    }
  }

  void handle(int conn) {
    timeval tv{2, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    Request req{};
    Reply reply{};
    ssize_t got = recv(conn, &req, sizeof(req), 0);
    ucred cred{};
    socklen_t cl = sizeof(cred);
    getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &cl);

    int send_fd = -1;
    std::shared_ptr<void> hold;  // keeps the owner (and its fd) alive while sending
    auto refuse = [&reply](int32_t status, const std::string& msg) {
      reply.status = status;
      std::snprintf(reply.message, sizeof(reply.message), "%s", msg.c_str());
    };
    if (got != static_cast<ssize_t>(sizeof(req)) || std::memcmp(req.magic, kRequestMagic, 8) != 0) {
      refuse(ACL_ERROR_RT_PARAM_INVALID, "malformed request");
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = entries_.find(req.id);
      if (it == entries_.end() || it->second.nonce != req.nonce ||
          static_cast<uint32_t>(it->second.e.kind) != req.kind) {
        refuse(ACL_ERROR_RT_PARAM_INVALID, "no such export in process " + std::to_string(own_pid()) +
                                               " (closed, destroyed, or never exported)");
      } else {
        const Export& e = it->second.e;
        hold = e.owner.lock();
        bool pid_ok = !e.check_pid ||
                      std::find(e.allowed_pids.begin(), e.allowed_pids.end(), cred.pid) != e.allowed_pids.end();
        if (hold == nullptr) {
          refuse(ACL_ERROR_RT_PARAM_INVALID, "the exported object was already freed by its owner");
        } else if (!pid_ok) {
          refuse(ACL_ERROR_RT_NO_PERMISSION, "process " + std::to_string(cred.pid) +
                                                 " is not allowed to import this key (aclrtIpcMemSetImportPid)");
        } else {
          reply.status = ACL_SUCCESS;
          reply.device = e.device;
          reply.offset = e.offset;
          reply.size = e.size;
          send_fd = e.fd;
        }
      }
    }
    iovec iov{&reply, sizeof(reply)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (send_fd >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &send_fd, sizeof(int));
    }
    sendmsg(conn, &msg, MSG_NOSIGNAL);
  }

 public:
  static void fill_address(int32_t pid, sockaddr_un* addr, socklen_t* len) {
    static const std::string ns = [] {
      char buf[64] = {};
      ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
      return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("pid:[0]");
    }();
    addr->sun_family = AF_UNIX;
    std::string name = "aclsim-broker-" + ns + "-" + std::to_string(pid);
    addr->sun_path[0] = '\0';  // abstract namespace
    std::memcpy(addr->sun_path + 1, name.data(), name.size());
    *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  }

 private:
  std::mutex mu_;
  Map entries_;
  uint64_t next_id_ = 0;
  std::mt19937_64 rng_{std::random_device{}()};
  int listener_fd_ = -1;
  bool started_ = false;
};

Server& server() {
  static NoDestructor<Server> s;
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] { server().reset_in_child(); });
    return true;
  }();
  (void)registered;
  return *s;
}

}  // namespace

aclError publish(Export e, Ticket* out) { return server().publish(std::move(e), out); }
bool retract(const Ticket& t) { return server().retract(t); }
aclError allow_pids(const Ticket& t, const int32_t* pids, size_t n) { return server().allow_pids(t, pids, n); }

aclError request(Kind kind, const Ticket& t, Grant* out) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(ACL_ERROR_RT_RESOURCE_ALLOC_FAIL, std::string("IPC socket: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_un addr{};
  socklen_t len = 0;
  Server::fill_address(t.pid, &addr, &len);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "the exporting process " + std::to_string(t.pid) +
                                                " is gone (or exported nothing): " + std::strerror(errno));
  }
  Request req{};
  std::memcpy(req.magic, kRequestMagic, 8);
  req.kind = static_cast<uint32_t>(kind);
  req.id = t.id;
  req.nonce = t.nonce;
  if (send(fd, &req, sizeof(req), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(req))) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, std::string("IPC request failed: ") + std::strerror(errno));
  }
  Reply reply{};
  iovec iov{&reply, sizeof(reply)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  int received = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&received, CMSG_DATA(c), sizeof(int));
  }
  if (got != static_cast<ssize_t>(sizeof(reply))) {
    if (received >= 0) close(received);
    return fail(ACL_ERROR_RT_PARAM_INVALID, "no answer from exporting process " + std::to_string(t.pid));
  }
  reply.message[sizeof(reply.message) - 1] = '\0';
  if (reply.status != ACL_SUCCESS || received < 0) {
    if (received >= 0) close(received);
    return fail(reply.status != ACL_SUCCESS ? reply.status : ACL_ERROR_RT_PARAM_INVALID,
                std::string("import refused by process ") + std::to_string(t.pid) + ": " + reply.message);
  }
  out->fd = received;
  out->offset = reply.offset;
  out->size = reply.size;
  out->device = reply.device;
  return ACL_SUCCESS;
}

std::string format_ticket(Kind kind, const Ticket& t) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "aclsim:%c:%" PRId32 ":%" PRIu64 ":%016" PRIx64, kind == Kind::Memory ? 'm' : 'e',
                t.pid, t.id, t.nonce);
  return buf;
}

bool parse_ticket(Kind kind, const char* text, size_t max_len, Ticket* out) {
  if (text == nullptr) return false;
  size_t n = strnlen(text, max_len);
  if (n == max_len || n == 0) return false;  // not NUL-terminated within the buffer
  std::string s(text, n);
  char k = 0;
  int32_t pid = 0;
  uint64_t id = 0, nonce = 0;
  int used = 0;
  if (std::sscanf(s.c_str(), "aclsim:%c:%" SCNd32 ":%" SCNu64 ":%16" SCNx64 "%n", &k, &pid, &id, &nonce, &used) != 4 ||
      static_cast<size_t>(used) != s.size() || k != (kind == Kind::Memory ? 'm' : 'e') || pid <= 0) {
    return false;
  }
  // Round trip: rejects leading zeros, signs and other forgeries of the text.
  Ticket t{pid, id, nonce};
  if (format_ticket(kind, t) != s) return false;
  *out = t;
  return true;
}

}  // namespace broker
}  // namespace aclsim
