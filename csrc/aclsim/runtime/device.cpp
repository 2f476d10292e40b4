#include "device.h"

#include <array>

#include "no_destructor.h"
#include "stream.h"

namespace aclsim {
namespace {

thread_local int t_current_device = -1;

std::array<Device, kMaxDevices>& devices() {
  static NoDestructor<std::array<Device, kMaxDevices>> all;
  static const bool init = [] {
    for (int i = 0; i < kMaxDevices; ++i) {
      (*all)[i].id = i;
      // Context tokens: recognisable, never dereferenced.
      (*all)[i].context = reinterpret_cast<aclrtContext>(uintptr_t{0x5C0000000000} + 16 * (i + 1));
    }
    return true;
  }();
  (void)init;
  return *all;
}

}  // namespace

bool valid_device(int id) { return id >= 0 && id < config().device_count(); }

Device& device(int id) { return devices()[id]; }

int current_device() { return t_current_device; }

void set_current_device(int id) { t_current_device = id; }

aclError require_current_device(int* id) {
  if (t_current_device < 0) {
    return fail(ACL_ERROR_RT_CONTEXT_NULL, "no current device on this thread: call aclrtSetDevice first");
  }
  *id = t_current_device;
  return ACL_SUCCESS;
}

aclrtStream default_stream(int id) {
  Device& d = device(id);
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.default_stream == nullptr) {
    d.default_stream = stream_table().add(std::make_shared<Stream>(id, /*is_default=*/true));
  }
  return d.default_stream;
}

bool peer_accessible(int from, int to) {
  if (from == to) return true;
  if (!valid_device(from) || !valid_device(to)) return false;
  return device(from).peer_enabled[to].load() || device(to).peer_enabled[from].load();
}

}  // namespace aclsim
