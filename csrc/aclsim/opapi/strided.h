// Strided, broadcasting iteration over N-dimensional views.
//
// An Operand is a view resolved for one iteration shape: the address of its
// element 0 and a byte stride per iteration dimension (0 along broadcast
// dimensions). for_each_element walks the shape in row-major order, after
// merging dimensions that are contiguous for every operand.
#pragma once

#include <acl/acl.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor.h"

namespace aclsim::opapi {

struct Operand {
  char* base = nullptr;
  aclDataType dtype = ACL_DT_UNDEFINED;
  std::vector<int64_t> byte_strides;  // one per iteration dimension
};

// torch.broadcast_shapes for two shapes; throws OpError naming `op` when they
// do not broadcast.
std::vector<int64_t> broadcast_shapes(const char* op, const std::vector<int64_t>& a,
                                      const std::vector<int64_t>& b);

// True when `from` broadcasts to `to` (aligned on the right, each dimension
// equal or 1).
bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to);

// Resolves `t` for iteration over `shape`, which `t.shape` must broadcast to.
Operand make_operand(const TensorDesc& t, const std::vector<int64_t>& shape);

// A contiguous operand over a buffer holding `shape` elements of `dtype`.
Operand contiguous_operand(void* base, aclDataType dtype, const std::vector<int64_t>& shape);

int64_t shape_numel(const std::vector<int64_t>& shape);

// Calls f(ptrs) once per element of `shape`, ptrs[k] pointing at operand k's
// element.
template <size_t K, class F>
void for_each_element(const std::vector<int64_t>& shape, const std::array<const Operand*, K>& ops,
                      F&& f) {
  // Drop size-1 dimensions and merge dimension d into d+1 when every operand
  // steps through them as one.
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, K>> strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    std::array<int64_t, K> s{};
    for (size_t k = 0; k < K; ++k) s[k] = ops[k]->byte_strides[d];
    if (!sizes.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < K; ++k) {
        if (strides.back()[k] != s[k] * shape[d]) mergeable = false;
      }
      if (mergeable) {
        sizes.back() *= shape[d];
        strides.back() = s;
        continue;
      }
    }
    sizes.push_back(shape[d]);
    strides.push_back(s);
  }

  std::array<char*, K> ptr{};
  for (size_t k = 0; k < K; ++k) ptr[k] = ops[k]->base;
  if (sizes.empty()) {
    f(ptr);
    return;
  }

  const size_t inner = sizes.size() - 1;
  const int64_t inner_size = sizes[inner];
  const std::array<int64_t, K> inner_stride = strides[inner];
  std::vector<int64_t> index(sizes.size(), 0);
  for (;;) {
    std::array<char*, K> p = ptr;
    for (int64_t i = 0; i < inner_size; ++i) {
      f(p);
      for (size_t k = 0; k < K; ++k) p[k] += inner_stride[k];
    }
    // Advance the outer dimensions like an odometer.
    size_t d = inner;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++index[d] < sizes[d]) {
        for (size_t k = 0; k < K; ++k) ptr[k] += strides[d][k];
        break;
      }
      for (size_t k = 0; k < K; ++k) ptr[k] -= strides[d][k] * (sizes[d] - 1);
      index[d] = 0;
    }
  }
}

}  // namespace aclsim::opapi
