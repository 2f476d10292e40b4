// IPC event handshake between two processes on one device.
//
//   ipc_event_handshake [--dir DIR] [--device N]  launch both roles, report PASS/FAIL
//   ipc_event_handshake producer --dir DIR [--device N]
//   ipc_event_handshake consumer --dir DIR [--device N]
//
// Producer: creates an event with ACL_EVENT_IPC, records it on a stream
// behind its own work, synchronizes, checks the status is COMPLETE, exports
// the 64-byte handle and writes it to DIR/event.handle.
// Consumer: reads the handle, opens the event, makes its stream wait on it,
// synchronizes, then queues its own work followed by a record of the SAME
// event, and tells the producer the record was issued.
// Producer: waits on the consumer's record twice - with a stream wait and
// with aclrtSynchronizeEvent - and checks that both returned only after the
// consumer's work finished. It keeps the event alive until the consumer says
// it is done with it.
//
// Only the handle and three small flag files cross between the processes;
// the ordering itself travels through the IPC event.
#include <string>

#include "sample_util.h"

namespace {

using sample::path_in;

constexpr const char* kHandleFile = "event.handle";
constexpr const char* kProducerWork = "producer.work";  // made by the producer's device work
constexpr const char* kConsumerWork = "consumer.work";  // made by the consumer's device work
constexpr const char* kRecordedFlag = "consumer.recorded";
constexpr const char* kDoneFlag = "consumer.done";

constexpr int kConsumerWorkMs = 200;

// Device-side "work": a host function that runs in stream order, takes a
// while, then leaves a marker file other processes can see.
struct Work {
  std::string marker;
  int duration_ms = 0;
};

void do_work(void* arg) {
  auto* w = static_cast<Work*>(arg);
  std::this_thread::sleep_for(std::chrono::milliseconds(w->duration_ms));
  sample::write_text(w->marker, "done\n");
}

// Runs in stream order after a wait: did the other side's work finish?
struct Probe {
  std::string marker;
  bool seen = false;
};

void probe(void* arg) {
  auto* p = static_cast<Probe*>(arg);
  p->seen = sample::file_exists(p->marker);
}

int producer(const std::string& dir, int32_t device) {
  sample::role() = "producer";
  sample::AclSession acl;
  ACL_CHECK(acl.init());
  ACL_CHECK(acl.set_device(device));
  sample::StreamGuard stream;
  ACL_CHECK(aclrtCreateStream(stream.out()));

  sample::EventGuard ev;
  ACL_CHECK(aclrtCreateEventExWithFlag(ev.out(), ACL_EVENT_IPC));
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  ACL_CHECK(aclrtQueryEventStatus(ev.get(), &status));
  SAMPLE_EXPECT(status == ACL_EVENT_RECORDED_STATUS_COMPLETE, "a never-recorded event must query COMPLETE, got %s",
                sample::status_name(status));
  SAMPLE_INFO("IPC event created on device %d", device);

  // 1. Own work, then the record; wait for it on the host.
  Work work{path_in(dir, kProducerWork), 20};
  ACL_CHECK(aclrtLaunchHostFunc(stream.get(), do_work, &work));
  ACL_CHECK(aclrtRecordEvent(ev.get(), stream.get()));
  ACL_CHECK(aclrtSynchronizeEventWithTimeout(ev.get(), sample::kTimeoutMs));
  ACL_CHECK(aclrtQueryEventStatus(ev.get(), &status));
  SAMPLE_EXPECT(status == ACL_EVENT_RECORDED_STATUS_COMPLETE, "status after synchronize: %s",
                sample::status_name(status));
  SAMPLE_INFO("event recorded and synchronized, status %d (%s)", static_cast<int>(status),
              sample::status_name(status));

  // 2. Export the handle, out of band.
  aclrtIpcEventHandle handle;
  ACL_CHECK(aclrtIpcGetEventHandle(ev.get(), &handle));
  SAMPLE_EXPECT(sample::write_file_atomic(path_in(dir, kHandleFile), &handle, sizeof(handle)),
                "cannot write %s: %s", kHandleFile, std::strerror(errno));
  SAMPLE_INFO("IPC event handle (%zu bytes) written to %s", sizeof(handle), kHandleFile);

  // 3. The consumer records the same event behind its work and tells us.
  SAMPLE_EXPECT(sample::wait_for_file(path_in(dir, kRecordedFlag)), "no record from the consumer within %d s",
                sample::kTimeoutSec);
  ACL_CHECK(aclrtQueryEventStatus(ev.get(), &status));
  SAMPLE_INFO("consumer's record issued; status now %s", sample::status_name(status));

  // 4a. A stream wait, bound to the consumer's record (the latest one).
  Probe on_stream{path_in(dir, kConsumerWork)};
  ACL_CHECK(aclrtStreamWaitEvent(stream.get(), ev.get()));
  ACL_CHECK(aclrtLaunchHostFunc(stream.get(), probe, &on_stream));
  // 4b. And a host wait.
  const double t0 = sample::now_ms();
  ACL_CHECK(aclrtSynchronizeEventWithTimeout(ev.get(), sample::kTimeoutMs));
  const double blocked_ms = sample::now_ms() - t0;
  const bool seen_on_host = sample::file_exists(path_in(dir, kConsumerWork));
  ACL_CHECK(aclrtSynchronizeStreamWithTimeout(stream.get(), sample::kTimeoutMs));
  SAMPLE_EXPECT(seen_on_host, "aclrtSynchronizeEvent returned before the consumer's work finished");
  SAMPLE_EXPECT(on_stream.seen, "the stream passed aclrtStreamWaitEvent before the consumer's work finished");
  ACL_CHECK(aclrtQueryEventStatus(ev.get(), &status));
  SAMPLE_EXPECT(status == ACL_EVENT_RECORDED_STATUS_COMPLETE, "status after the consumer's record: %s",
                sample::status_name(status));
  SAMPLE_INFO("woken by the consumer's record (host blocked %.1f ms); stream wait also ordered", blocked_ms);

  // 5. Keep the event alive until the consumer is finished with it.
  SAMPLE_EXPECT(sample::wait_for_file(path_in(dir, kDoneFlag)), "consumer did not finish within %d s",
                sample::kTimeoutSec);
  SAMPLE_INFO("consumer finished");

  ACL_CHECK(ev.destroy());
  ACL_CHECK(stream.destroy());
  ACL_CHECK(acl.close());
  SAMPLE_INFO("cleanup completed");
  std::printf("[PASS] producer: IPC event handshake\n");
  return 0;
}

int consumer(const std::string& dir, int32_t device) {
  sample::role() = "consumer";
  const std::string handle_path = path_in(dir, kHandleFile);
  SAMPLE_EXPECT(sample::wait_for_file(handle_path), "no event handle within %d s", sample::kTimeoutSec);
  aclrtIpcEventHandle handle;
  SAMPLE_EXPECT(sample::read_exact(handle_path, &handle, sizeof(handle)), "cannot read %zu bytes from %s",
                sizeof(handle), kHandleFile);

  sample::AclSession acl;
  ACL_CHECK(acl.init());
  ACL_CHECK(acl.set_device(device));
  sample::StreamGuard stream;
  ACL_CHECK(aclrtCreateStream(stream.out()));

  sample::EventGuard ev;
  ACL_CHECK(aclrtIpcOpenEventHandle(handle, ev.out()));
  SAMPLE_INFO("IPC event opened on device %d", device);

  // 1. Wait for the producer's record on the stream.
  Probe producer_done{path_in(dir, kProducerWork)};
  ACL_CHECK(aclrtStreamWaitEvent(stream.get(), ev.get()));
  ACL_CHECK(aclrtLaunchHostFunc(stream.get(), probe, &producer_done));
  ACL_CHECK(aclrtSynchronizeStreamWithTimeout(stream.get(), sample::kTimeoutMs));
  SAMPLE_EXPECT(producer_done.seen, "the stream passed the wait before the producer's work finished");
  SAMPLE_INFO("event received, stream synchronized");

  // 2. Own work, then record the same event to signal back.
  Work work{path_in(dir, kConsumerWork), kConsumerWorkMs};
  ACL_CHECK(aclrtLaunchHostFunc(stream.get(), do_work, &work));
  ACL_CHECK(aclrtRecordEvent(ev.get(), stream.get()));
  SAMPLE_EXPECT(sample::write_text(path_in(dir, kRecordedFlag), "recorded\n"), "cannot write %s", kRecordedFlag);
  ACL_CHECK(aclrtSynchronizeEventWithTimeout(ev.get(), sample::kTimeoutMs));
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  ACL_CHECK(aclrtQueryEventStatus(ev.get(), &status));
  SAMPLE_EXPECT(status == ACL_EVENT_RECORDED_STATUS_COMPLETE, "status after own record: %s",
                sample::status_name(status));
  SAMPLE_INFO("work done and event recorded, status %d (%s)", static_cast<int>(status), sample::status_name(status));
  ACL_CHECK(aclrtSynchronizeStreamWithTimeout(stream.get(), sample::kTimeoutMs));

  ACL_CHECK(ev.destroy());
  ACL_CHECK(stream.destroy());
  ACL_CHECK(acl.close());
  SAMPLE_EXPECT(sample::write_text(path_in(dir, kDoneFlag), "done\n"), "cannot write %s", kDoneFlag);
  SAMPLE_INFO("cleanup completed");
  std::printf("[PASS] consumer: IPC event handshake\n");
  return 0;
}

int launch(std::string dir, int32_t device) {
  const bool own_dir = dir.empty();
  if (own_dir) dir = sample::make_work_dir("ipc_event_handshake");
  SAMPLE_EXPECT(!dir.empty(), "cannot create a work directory: %s", std::strerror(errno));
  const std::vector<std::string> files = {kHandleFile, kProducerWork, kConsumerWork, kRecordedFlag, kDoneFlag};
  sample::remove_files(dir, files, false);  // leftovers of an earlier run
  SAMPLE_INFO("work directory %s", dir.c_str());

  const std::string dev = std::to_string(device);
  std::vector<sample::Child> children = {
      {"producer", sample::spawn_self({"producer", "--dir", dir, "--device", dev})},
      {"consumer", sample::spawn_self({"consumer", "--dir", dir, "--device", dev})},
  };
  bool spawned = true;
  for (const sample::Child& c : children) spawned = spawned && c.pid > 0;
  if (!spawned) {
    for (sample::Child& c : children) c.done = c.pid <= 0;
  }
  const bool in_time = sample::wait_children(children, 2 * sample::kTimeoutSec);
  bool ok = spawned && in_time;
  for (const sample::Child& c : children) {
    if (c.status != 0) {
      SAMPLE_FAIL("%s exited with status %d", c.name.c_str(), c.status);
      ok = false;
    }
  }
  sample::remove_files(dir, files, own_dir);
  if (ok) {
    std::printf("[PASS] IPC event handshake between two processes on device %d\n", device);
    return 0;
  }
  std::printf("[FAIL] IPC event handshake\n");
  return 1;
}

int usage(const char* prog) {
  std::fprintf(stderr, "usage: %s [producer|consumer] [--dir DIR] [--device N]\n", prog);
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "run";
  std::string dir;
  int32_t device = 0;
  int i = 1;
  if (i < argc && argv[i][0] != '-') mode = argv[i++];
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--device" && i + 1 < argc) {
      device = static_cast<int32_t>(std::atoi(argv[++i]));
    } else {
      return usage(argv[0]);
    }
  }
  if (mode == "run") return launch(dir, device);
  if (dir.empty()) return usage(argv[0]);
  if (mode == "producer") return producer(dir, device);
  if (mode == "consumer") return consumer(dir, device);
  return usage(argv[0]);
}
