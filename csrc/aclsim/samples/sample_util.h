// Helpers shared by the IPC event samples: ACL return-code checks, logging,
// out-of-band files with timeouts, and a tiny process launcher.
//
// The samples use only the public ACL headers (the copy torch_npu ships) and
// POSIX, so they build against aclsim and a real CANN install alike.
#pragma once

#include <acl/acl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace sample {

// Every wait on another process is bounded by this.
constexpr int kTimeoutSec = 30;
constexpr int32_t kTimeoutMs = kTimeoutSec * 1000;

inline std::string& role() {
  static std::string r = "main";
  return r;
}

inline void log(const char* level, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::printf("[%s] %s: %s\n", level, role().c_str(), buf);
  std::fflush(stdout);
}

#define SAMPLE_INFO(...) ::sample::log("INFO", __VA_ARGS__)
#define SAMPLE_FAIL(...) ::sample::log("FAIL", __VA_ARGS__)

// Reports a failed ACL call with the runtime's own message.
inline void report_acl_error(const char* call, aclError rc, int line) {
  const char* msg = aclGetRecentErrMsg();
  SAMPLE_FAIL("%s returned %d (line %d): %s", call, static_cast<int>(rc), line,
              (msg != nullptr && *msg != '\0') ? msg : "no message");
}

// Every ACL call goes through this: on failure, report and return 1 from the
// enclosing function (a role's main), whose RAII guards then release what
// was acquired.
#define ACL_CHECK(call)                                        \
  do {                                                         \
    aclError acl_rc_ = (call);                                 \
    if (acl_rc_ != ACL_SUCCESS) {                              \
      ::sample::report_acl_error(#call, acl_rc_, __LINE__);    \
      return 1;                                                \
    }                                                          \
  } while (0)

#define SAMPLE_EXPECT(cond, ...) \
  do {                           \
    if (!(cond)) {               \
      SAMPLE_FAIL(__VA_ARGS__);  \
      return 1;                  \
    }                            \
  } while (0)

inline const char* status_name(aclrtEventRecordedStatus s) {
  return s == ACL_EVENT_RECORDED_STATUS_COMPLETE ? "COMPLETE" : "NOT_READY";
}

inline double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// --- ACL resources, released in reverse order on every exit path ----------

// aclInit + aclrtSetDevice; aclrtResetDevice (never the Force variant, which
// would tear the device down under the other processes) + aclFinalize.
class AclSession {
 public:
  AclSession() = default;
  ~AclSession() { (void)close(); }
  AclSession(const AclSession&) = delete;
  AclSession& operator=(const AclSession&) = delete;

  aclError init() {
    aclError rc = aclInit(nullptr);
    if (rc == ACL_SUCCESS) initialized_ = true;
    return rc;
  }
  aclError set_device(int32_t dev) {
    aclError rc = aclrtSetDevice(dev);
    if (rc == ACL_SUCCESS) device_ = dev;
    return rc;
  }
  // Returns the first error; safe to call more than once.
  aclError close() {
    aclError first = ACL_SUCCESS;
    if (device_ >= 0) {
      first = aclrtResetDevice(device_);
      device_ = -1;
    }
    if (initialized_) {
      aclError rc = aclFinalize();
      if (first == ACL_SUCCESS) first = rc;
      initialized_ = false;
    }
    return first;
  }

 private:
  bool initialized_ = false;
  int32_t device_ = -1;
};

class StreamGuard {
 public:
  StreamGuard() = default;
  ~StreamGuard() { (void)destroy(); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  aclrtStream* out() { return &stream_; }
  aclrtStream get() const { return stream_; }
  aclError destroy() {
    if (stream_ == nullptr) return ACL_SUCCESS;
    aclError rc = aclrtDestroyStream(stream_);
    stream_ = nullptr;
    return rc;
  }

 private:
  aclrtStream stream_ = nullptr;
};

class EventGuard {
 public:
  EventGuard() = default;
  ~EventGuard() { (void)destroy(); }
  EventGuard(const EventGuard&) = delete;
  EventGuard& operator=(const EventGuard&) = delete;
  aclrtEvent* out() { return &event_; }
  aclrtEvent get() const { return event_; }
  aclError destroy() {
    if (event_ == nullptr) return ACL_SUCCESS;
    aclError rc = aclrtDestroyEvent(event_);
    event_ = nullptr;
    return rc;
  }

 private:
  aclrtEvent event_ = nullptr;
};

// --- Out-of-band files -----------------------------------------------------

inline std::string path_in(const std::string& dir, const std::string& name) { return dir + "/" + name; }

inline bool file_exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Writes via a temporary name and rename(), so a reader never sees a
// partially written file.
inline bool write_file_atomic(const std::string& path, const void* data, size_t len) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, p + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

inline bool write_text(const std::string& path, const std::string& text) {
  return write_file_atomic(path, text.data(), text.size());
}

// Reads exactly len bytes; false on a short or failed read.
inline bool read_exact(const std::string& path, void* data, size_t len) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < len) {
    ssize_t n = read(fd, p + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  return done == len;
}

inline std::string read_text(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return out;
  char buf[256];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// Polls for a file every millisecond, up to kTimeoutSec.
inline bool wait_for_file(const std::string& path) {
  const double deadline = now_ms() + kTimeoutSec * 1000.0;
  while (!file_exists(path)) {
    if (now_ms() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// --- Launching the roles as real processes ---------------------------------

// fork + exec of this same binary with the given arguments; -1 on failure.
inline pid_t spawn_self(const std::vector<std::string>& args) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  std::vector<char*> argv;
  argv.push_back(exe);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    execv(exe, argv.data());
    std::perror("execv");
    _exit(127);
  }
  return pid;
}

struct Child {
  std::string name;
  pid_t pid = -1;
  int status = -1;  // exit code, or 128 + signal
  bool done = false;
};

// Waits for every child until the deadline; kills (only) the children it was
// given that are still running then. Returns false on a timeout.
inline bool wait_children(std::vector<Child>& children, int timeout_sec) {
  const double deadline = now_ms() + timeout_sec * 1000.0;
  size_t remaining = children.size();
  while (remaining > 0) {
    for (Child& c : children) {
      if (c.done) continue;
      int st = 0;
      pid_t r = waitpid(c.pid, &st, WNOHANG);
      if (r == c.pid) {
        c.done = true;
        c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (now_ms() > deadline) {
      for (Child& c : children) {
        if (c.done) continue;
        kill(c.pid, SIGKILL);
        waitpid(c.pid, nullptr, 0);
        c.done = true;
        c.status = 128 + SIGKILL;
        SAMPLE_FAIL("%s (pid %d) did not finish within %d s; killed", c.name.c_str(), static_cast<int>(c.pid),
                    timeout_sec);
      }
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A fresh private working directory for the out-of-band files.
inline std::string make_work_dir(const char* tag) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + tag + ".XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return std::string();
  return std::string(buf.data());
}

// Removes the sample's own files and the directory (if it is empty then).
inline void remove_files(const std::string& dir, const std::vector<std::string>& names, bool remove_dir) {
  for (const std::string& n : names) unlink(path_in(dir, n).c_str());
  if (remove_dir) rmdir(dir.c_str());
}

}  // namespace sample
