// One producer on device 0, N consumers on devices 1..N, synchronized with a
// single IPC event.
//
//   ipc_event_multi_device [N] [--dir DIR]    precheck, launch all roles, report PASS/FAIL/SKIP
//   ipc_event_multi_device precheck DEVICES   exit 0 if at least DEVICES devices exist, 2 if not
//   ipc_event_multi_device producer N --dir DIR
//   ipc_event_multi_device consumer ID DEVICE --dir DIR
//
// N is 1..8 (default 1). Without N + 1 devices the launcher prints [SKIP]
// and exits 0: too small a machine is not a failure.
//
// Flow:
//   producer  create the IPC event on device 0, record it behind its work,
//             synchronize, check COMPLETE, write the handle to DIR/event.handle
//   consumer  open the handle on its own device, write consumer_<id>.opened,
//             wait on the event on its stream
//   producer  once every consumer opened the handle: record the event again
//             behind a slow "go" task, then write go.flag (record issued)
//   consumer  on go.flag: stream-wait (bound to that pending record), check
//             in stream order that the producer's go task already ran, do its
//             own work, then - in turn, consumer 1 first - record the same
//             event, synchronize it, check COMPLETE (the status of the
//             latest record), write consumer_<id>.signalled, release
//             everything, write consumer_<id>.done
//   producer  keep the event alive until every consumer is done, then clean up
//
// Every wait on another process gives up after 30 s.
#include <string>

#include "sample_util.h"

namespace {

using sample::path_in;

constexpr int kMaxConsumers = 8;
constexpr int kExitSkip = 2;

constexpr const char* kHandleFile = "event.handle";
constexpr const char* kProducerWork = "producer.work";
constexpr const char* kGoWork = "go.work";  // made by the task before the "go" record
constexpr const char* kGoFlag = "go.flag";  // the "go" record has been issued

std::string opened_flag(int id) { return "consumer_" + std::to_string(id) + ".opened"; }
std::string done_flag(int id) { return "consumer_" + std::to_string(id) + ".done"; }
std::string signalled_flag(int id) { return "consumer_" + std::to_string(id) + ".signalled"; }

struct Work {
  std::string marker;
  int duration_ms = 0;
};

void do_work(void* arg) {
  auto* w = static_cast<Work*>(arg);
  std::this_thread::sleep_for(std::chrono::milliseconds(w->duration_ms));
  if (!w->marker.empty()) sample::write_text(w->marker, "done\n");
}

struct Probe {
  std::string marker;
  bool seen = false;
};

void probe(void* arg) {
  auto* p = static_cast<Probe*>(arg);
  p->seen = sample::file_exists(p->marker);
}

int precheck(int required) {
  sample::role() = "precheck";
  sample::AclSession acl;
  ACL_CHECK(acl.init());
  uint32_t count = 0;
  ACL_CHECK(aclrtGetDeviceCount(&count));
  ACL_CHECK(acl.close());
  if (count < static_cast<uint32_t>(required)) {
    std::printf("[SKIP] need at least %d devices, but only %u available\n", required, count);
    return kExitSkip;
  }
  SAMPLE_INFO("%u devices available, %d required", count, required);
  return 0;
}

// Waits until every consumer left the given flag file.
bool wait_all(const std::string& dir, int consumers, std::string (*flag)(int)) {
  for (int id = 1; id <= consumers; ++id) {
    if (!sample::wait_for_file(path_in(dir, flag(id)))) {
      SAMPLE_FAIL("no %s within %d s", flag(id).c_str(), sample::kTimeoutSec);
      return false;
    }
  }
  return true;
}

int producer(const std::string& dir, int consumers) {
  sample::role() = "producer";
  constexpr int32_t kDevice = 0;
  SAMPLE_INFO("starting on device %d, waiting for %d consumer(s)", kDevice, consumers);
  sample::AclSession acl;
  ACL_CHECK(acl.init());
  ACL_CHECK(acl.set_device(kDevice));
  sample::StreamGuard stream;
  ACL_CHECK(aclrtCreateStream(stream.out()));
  sample::EventGuard ev;
  ACL_CHECK(aclrtCreateEventExWithFlag(ev.out(), ACL_EVENT_IPC));
  SAMPLE_INFO("IPC event created on device %d", kDevice);

  Work work{path_in(dir, kProducerWork), 10};
  ACL_CHECK(aclrtLaunchHostFunc(stream.get(), do_work, &work));
  ACL_CHECK(aclrtRecordEvent(ev.get(), stream.get()));
  ACL_CHECK(aclrtSynchronizeEventWithTimeout(ev.get(), sample::kTimeoutMs));
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  ACL_CHECK(aclrtQueryEventStatus(ev.get(), &status));
  SAMPLE_EXPECT(status == ACL_EVENT_RECORDED_STATUS_COMPLETE, "status after synchronize: %s",
                sample::status_name(status));
  SAMPLE_INFO("event status %d (%s)", static_cast<int>(status), sample::status_name(status));

  aclrtIpcEventHandle handle;
  ACL_CHECK(aclrtIpcGetEventHandle(ev.get(), &handle));
  SAMPLE_EXPECT(sample::write_file_atomic(path_in(dir, kHandleFile), &handle, sizeof(handle)),
                "cannot write %s: %s", kHandleFile, std::strerror(errno));
  SAMPLE_INFO("handle written to %s", kHandleFile);

  // The event must outlive every importer's open.
  if (!wait_all(dir, consumers, opened_flag)) return 1;
  SAMPLE_INFO("all %d consumers opened the event", consumers);

  // The "go" record, queued behind a slow task: consumers that wait on it
  // must not pass before that task ran.
  Work go{path_in(dir, kGoWork), 100};
  ACL_CHECK(aclrtLaunchHostFunc(stream.get(), do_work, &go));
  ACL_CHECK(aclrtRecordEvent(ev.get(), stream.get()));
  SAMPLE_EXPECT(sample::write_text(path_in(dir, kGoFlag), "go\n"), "cannot write %s", kGoFlag);
  SAMPLE_INFO("go record issued");

  if (!wait_all(dir, consumers, done_flag)) return 1;
  for (int id = 1; id <= consumers; ++id) {
    const std::string report = sample::read_text(path_in(dir, done_flag(id)));
    const std::string expected = "device=" + std::to_string(id) + " ok\n";
    SAMPLE_EXPECT(report == expected, "consumer %d reported '%s', expected '%s'", id, report.c_str(),
                  expected.c_str());
  }
  SAMPLE_INFO("all %d consumers have finished", consumers);

  ACL_CHECK(aclrtSynchronizeStreamWithTimeout(stream.get(), sample::kTimeoutMs));
  ACL_CHECK(aclrtSynchronizeEventWithTimeout(ev.get(), sample::kTimeoutMs));
  ACL_CHECK(aclrtQueryEventStatus(ev.get(), &status));
  SAMPLE_EXPECT(status == ACL_EVENT_RECORDED_STATUS_COMPLETE, "final status: %s", sample::status_name(status));
  ACL_CHECK(ev.destroy());
  ACL_CHECK(stream.destroy());
  ACL_CHECK(acl.close());
  std::printf("[PASS] producer: %d consumer(s) on devices 1..%d finished successfully\n", consumers, consumers);
  return 0;
}

int consumer(const std::string& dir, int id, int32_t device) {
  sample::role() = "consumer " + std::to_string(id);
  SAMPLE_INFO("starting on device %d", device);
  const std::string handle_path = path_in(dir, kHandleFile);
  SAMPLE_EXPECT(sample::wait_for_file(handle_path), "no event handle within %d s", sample::kTimeoutSec);
  aclrtIpcEventHandle handle;
  SAMPLE_EXPECT(sample::read_exact(handle_path, &handle, sizeof(handle)), "cannot read the handle");

  sample::AclSession acl;
  ACL_CHECK(acl.init());
  ACL_CHECK(acl.set_device(device));
  sample::StreamGuard stream;
  ACL_CHECK(aclrtCreateStream(stream.out()));
  sample::EventGuard ev;
  ACL_CHECK(aclrtIpcOpenEventHandle(handle, ev.out()));
  SAMPLE_EXPECT(sample::write_text(path_in(dir, opened_flag(id)), "opened\n"), "cannot write the opened flag");
  SAMPLE_INFO("IPC event opened on device %d", device);

  // The first record (already complete) - as in the single-device sample.
  Probe first{path_in(dir, kProducerWork)};
  ACL_CHECK(aclrtStreamWaitEvent(stream.get(), ev.get()));
  ACL_CHECK(aclrtLaunchHostFunc(stream.get(), probe, &first));
  ACL_CHECK(aclrtSynchronizeStreamWithTimeout(stream.get(), sample::kTimeoutMs));
  SAMPLE_EXPECT(first.seen, "passed the first wait before the producer's work finished");

  // The go record: issued by the producer before go.flag appeared, so this
  // wait is bound to it (or to a later record by another consumer, which
  // itself ran after the go task).
  SAMPLE_EXPECT(sample::wait_for_file(path_in(dir, kGoFlag)), "no go signal within %d s", sample::kTimeoutSec);
  Probe go{path_in(dir, kGoWork)};
  ACL_CHECK(aclrtStreamWaitEvent(stream.get(), ev.get()));
  ACL_CHECK(aclrtLaunchHostFunc(stream.get(), probe, &go));
  ACL_CHECK(aclrtSynchronizeStreamWithTimeout(stream.get(), sample::kTimeoutMs));
  SAMPLE_EXPECT(go.seen, "the stream on device %d passed the wait before the producer's go task ran", device);
  SAMPLE_INFO("event received across devices, stream synchronized");

  // Signal back by recording the same event. Its status is that of its
  // LATEST record, whoever issued it, so consumers take turns: otherwise a
  // neighbour's newer, still pending record would make our query NOT_READY.
  if (id > 1) {
    SAMPLE_EXPECT(sample::wait_for_file(path_in(dir, signalled_flag(id - 1))), "consumer %d did not signal within %d s",
                  id - 1, sample::kTimeoutSec);
  }
  Work work{std::string(), 20};
  ACL_CHECK(aclrtLaunchHostFunc(stream.get(), do_work, &work));
  ACL_CHECK(aclrtRecordEvent(ev.get(), stream.get()));
  ACL_CHECK(aclrtSynchronizeEventWithTimeout(ev.get(), sample::kTimeoutMs));
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  ACL_CHECK(aclrtQueryEventStatus(ev.get(), &status));
  SAMPLE_EXPECT(status == ACL_EVENT_RECORDED_STATUS_COMPLETE, "status after own record: %s",
                sample::status_name(status));
  SAMPLE_INFO("event status %d (%s)", static_cast<int>(status), sample::status_name(status));
  SAMPLE_EXPECT(sample::write_text(path_in(dir, signalled_flag(id)), "signalled\n"), "cannot write the signalled flag");

  ACL_CHECK(ev.destroy());
  ACL_CHECK(stream.destroy());
  ACL_CHECK(acl.close());
  const std::string report = "device=" + std::to_string(device) + " ok\n";
  SAMPLE_EXPECT(sample::write_text(path_in(dir, done_flag(id)), report), "cannot write the done flag");
  std::printf("[PASS] consumer %d (device %d) finished successfully\n", id, device);
  return 0;
}

std::vector<std::string> all_files(int consumers) {
  std::vector<std::string> files = {kHandleFile, kProducerWork, kGoWork, kGoFlag};
  for (int id = 1; id <= consumers; ++id) {
    files.push_back(opened_flag(id));
    files.push_back(done_flag(id));
    files.push_back(signalled_flag(id));
  }
  return files;
}

int launch(int consumers, std::string dir) {
  std::vector<sample::Child> pre = {{"precheck", sample::spawn_self({"precheck", std::to_string(consumers + 1)})}};
  SAMPLE_EXPECT(pre[0].pid > 0, "cannot start the precheck: %s", std::strerror(errno));
  sample::wait_children(pre, sample::kTimeoutSec);
  if (pre[0].status == kExitSkip) {
    std::printf("[SKIP] IPC event multi-device sample: fewer than %d devices\n", consumers + 1);
    return 0;
  }
  SAMPLE_EXPECT(pre[0].status == 0, "device count precheck failed (status %d)", pre[0].status);

  const bool own_dir = dir.empty();
  if (own_dir) dir = sample::make_work_dir("ipc_event_multi_device");
  SAMPLE_EXPECT(!dir.empty(), "cannot create a work directory: %s", std::strerror(errno));
  const std::vector<std::string> files = all_files(consumers);
  sample::remove_files(dir, files, false);
  SAMPLE_INFO("work directory %s", dir.c_str());

  std::vector<sample::Child> children;
  children.push_back({"producer", sample::spawn_self({"producer", std::to_string(consumers), "--dir", dir})});
  for (int id = 1; id <= consumers; ++id) {
    const std::string s = std::to_string(id);  // consumer i runs on device i
    children.push_back({"consumer " + s, sample::spawn_self({"consumer", s, s, "--dir", dir})});
  }
  bool ok = true;
  for (sample::Child& c : children) {
    if (c.pid <= 0) {
      SAMPLE_FAIL("cannot start %s", c.name.c_str());
      c.done = true;
      ok = false;
    }
  }
  ok = sample::wait_children(children, 2 * sample::kTimeoutSec) && ok;
  for (const sample::Child& c : children) {
    if (c.pid > 0 && c.status != 0) {
      SAMPLE_FAIL("%s exited with status %d", c.name.c_str(), c.status);
      ok = false;
    }
  }
  sample::remove_files(dir, files, own_dir);
  if (ok) {
    std::printf("[PASS] IPC event multi-device synchronization: 1 producer -> %d consumer(s)\n", consumers);
    return 0;
  }
  std::printf("[FAIL] IPC event multi-device synchronization\n");
  return 1;
}

int usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s [N] [--dir DIR]\n"
               "       %s precheck DEVICES\n"
               "       %s producer N --dir DIR\n"
               "       %s consumer ID DEVICE --dir DIR\n",
               prog, prog, prog, prog);
  return 64;
}

bool parse_int(const char* s, int lo, int hi, int* out) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (!a.empty() && a[0] == '-') {
      return usage(argv[0]);
    } else {
      pos.push_back(a);
    }
  }
  int n = 1;
  int dev = 0;
  if (pos.empty() || std::isdigit(static_cast<unsigned char>(pos[0][0]))) {
    if (pos.size() > 1 || (pos.size() == 1 && !parse_int(pos[0].c_str(), 1, kMaxConsumers, &n))) {
      std::fprintf(stderr, "number of consumers must be 1..%d\n", kMaxConsumers);
      return usage(argv[0]);
    }
    return launch(n, dir);
  }
  const std::string& mode = pos[0];
  if (mode == "precheck" && pos.size() == 2 && parse_int(pos[1].c_str(), 1, kMaxConsumers + 1, &n)) {
    return precheck(n);
  }
  if (dir.empty()) return usage(argv[0]);
  if (mode == "producer" && pos.size() == 2 && parse_int(pos[1].c_str(), 1, kMaxConsumers, &n)) {
    return producer(dir, n);
  }
  if (mode == "consumer" && pos.size() == 3 && parse_int(pos[1].c_str(), 1, kMaxConsumers, &n) &&
      parse_int(pos[2].c_str(), 0, 1 << 16, &dev)) {
    return consumer(dir, n, dev);
  }
  return usage(argv[0]);
}
