// Process-lifetime singletons that are never destroyed.
//
// Stream worker threads may still run while the process exits; tearing the
// runtime's tables down under them would be a use-after-free. Like
// absl::NoDestructor, the object lives in static storage and its destructor
// is never run.
#pragma once

#include <new>
#include <utility>

namespace aclsim {

template <class T>
class NoDestructor {
 public:
  template <class... Args>
  explicit NoDestructor(Args&&... args) {
    ::new (static_cast<void*>(storage_)) T(std::forward<Args>(args)...);
  }
  NoDestructor(const NoDestructor&) = delete;
  NoDestructor& operator=(const NoDestructor&) = delete;

  T& operator*() { return *std::launder(reinterpret_cast<T*>(storage_)); }
  T* operator->() { return &**this; }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace aclsim
