// Opaque handles for runtime objects (streams, events, contexts).
//
// A handle is a token, not the object's address: tokens are never reused,
// so a stale or forged handle is always detected (the lookup fails) instead
// of aliasing a newer object or being dereferenced.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace aclsim {

template <class T>
class HandleTable {
 public:
  explicit HandleTable(uintptr_t tag) : tag_(tag) {}

  void* add(std::shared_ptr<T> obj) {
    std::lock_guard<std::mutex> lock(mu_);
    uintptr_t token = tag_ + (++next_) * 16;
    map_.emplace(token, std::move(obj));
    return reinterpret_cast<void*>(token);
  }

  std::shared_ptr<T> get(const void* handle) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(reinterpret_cast<uintptr_t>(handle));
    return it == map_.end() ? nullptr : it->second;
  }

  std::shared_ptr<T> remove(const void* handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(reinterpret_cast<uintptr_t>(handle));
    if (it == map_.end()) return nullptr;
    std::shared_ptr<T> obj = std::move(it->second);
    map_.erase(it);
    return obj;
  }

  std::vector<std::shared_ptr<T>> all() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<T>> out;
    out.reserve(map_.size());
    for (const auto& kv : map_) out.push_back(kv.second);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uintptr_t, std::shared_ptr<T>> map_;
  uintptr_t tag_;
  uintptr_t next_ = 0;
};

}  // namespace aclsim
