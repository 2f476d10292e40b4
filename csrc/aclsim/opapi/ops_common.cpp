// Argument checks and run-time operand preparation shared by the operators.
#include <string>

#include "aclsim/runtime.h"
#include "dtype.h"
#include "opapi.h"

namespace aclsim::opapi {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

// Byte range [lo, hi) touched by a non-empty view.
struct Extent {
  const char* lo;
  const char* hi;
};

Extent extent(const TensorDesc& t) {
  int64_t lo = t.offset;
  int64_t hi = t.offset;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    const int64_t span = (t.shape[i] - 1) * t.strides[i];
    if (span < 0) lo += span; else hi += span;
  }
  const auto item = static_cast<int64_t>(element_size(t.dtype));
  const char* base = static_cast<const char*>(t.data);
  return {base + lo * item, base + (hi + 1) * item};
}

}  // namespace

const TensorDesc& tensor_arg(const char* name, const aclTensor* t) {
  if (t == nullptr) throw_nullptr(name);
  return t->desc;
}

void check_tensor(const char* name, const TensorDesc& t) {
  require_supported(name, t.dtype);
  if (t.strides.size() != t.shape.size()) {
    throw_invalid(std::string(name) + " has " + std::to_string(t.strides.size()) +
                  " strides for " + std::to_string(t.shape.size()) + " dims");
  }
  if (t.numel() == 0) return;
  if (t.data == nullptr) throw_nullptr(std::string(name) + " data");
  int64_t lowest = t.offset;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.strides[i] < 0) lowest += (t.shape[i] - 1) * t.strides[i];
  }
  if (lowest < 0) {
    throw_invalid(std::string(name) + " view reaches before the start of its storage");
  }
  const Extent e = extent(t);
  if (!aclsim::is_device_range(e.lo, static_cast<size_t>(e.hi - e.lo))) {
    throw_invalid(std::string(name) + " data [" + std::to_string(reinterpret_cast<uintptr_t>(e.lo)) +
                  ", +" + std::to_string(e.hi - e.lo) +
                  " bytes) is not inside a live device allocation");
  }
}

ScalarValue scalar_arg(const char* name, const aclScalar* s) {
  if (s == nullptr) throw_nullptr(name);
  require_supported(name, s->value.dtype);
  return s->value;
}

void check_broadcast(const char* name, const TensorDesc& t, const std::vector<int64_t>& shape) {
  if (!broadcasts_to(t.shape, shape)) {
    throw_invalid(std::string(name) + " of shape " + shape_text(t.shape) +
                  " does not broadcast to " + shape_text(shape));
  }
}

bool overlaps(const TensorDesc& a, const TensorDesc& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const Extent ea = extent(a);
  const Extent eb = extent(b);
  return ea.lo < eb.hi && eb.lo < ea.hi;
}

bool same_view(const TensorDesc& a, const TensorDesc& b) {
  if (a.dtype != b.dtype || a.origin() != b.origin() || a.shape != b.shape) return false;
  for (size_t i = 0; i < a.shape.size(); ++i) {
    if (a.shape[i] != 1 && a.strides[i] != b.strides[i]) return false;
  }
  return true;
}

Operand input_operand(const TensorDesc& in, aclDataType dtype, const TensorDesc& out,
                      const std::vector<int64_t>& shape, std::vector<Materialized>& keep) {
  const bool aliased = overlaps(in, out) && !same_view(in, out);
  if (in.dtype == dtype && !aliased) return make_operand(in, shape);
  keep.push_back(materialize(in, dtype));
  return make_operand(keep.back().desc, shape);
}

}  // namespace aclsim::opapi
