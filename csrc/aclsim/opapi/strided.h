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
#include <utility>
#include <vector>

#include "tensor.h"

namespace aclsim::opapi {

struct Operand {
  char* base = nullptr;
  aclDataType dtype = ACL_DT_UNDEFINED;
  std::vector<int64_t> byte_strides;  // one per iteration dimension
};

// True when `from` broadcasts to `to` (aligned on the right, each dimension
// equal or 1).
bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to);

// Resolves `t` for iteration over `shape`, which `t.shape` must broadcast to.
Operand make_operand(const TensorDesc& t, const std::vector<int64_t>& shape);

int64_t shape_numel(const std::vector<int64_t>& shape);

namespace detail {

// One row: n elements, operand k at rows[k] + i * strides[k]. The pointers
// are passed to f as separate arguments so they live in registers; when
// every operand is dense (stride == element size, known at compile time)
// the strides are constants, which lets the compiler vectorize.
template <size_t... Sizes, size_t... I, class F>
inline void run_row(const std::array<char*, sizeof...(Sizes)>& rows, int64_t n,
                    const std::array<int64_t, sizeof...(Sizes)>& strides,
                    std::index_sequence<I...>, F& f) {
  constexpr std::array<int64_t, sizeof...(Sizes)> sizes{static_cast<int64_t>(Sizes)...};
  if (((strides[I] == sizes[I]) && ...)) {
    for (int64_t i = 0; i < n; ++i) f((rows[I] + i * sizes[I])...);
  } else {
    for (int64_t i = 0; i < n; ++i) f((rows[I] + i * strides[I])...);
  }
}

}  // namespace detail

// Calls f(p0, p1, ...) once per element of `shape`, pk pointing at operand
// k's element. Sizes... are the operands' element sizes.
template <size_t... Sizes, class F>
void for_each_element(const std::vector<int64_t>& shape,
                      const std::array<const Operand*, sizeof...(Sizes)>& ops, F&& f) {
  constexpr size_t K = sizeof...(Sizes);
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
  if (sizes.empty()) {  // a single element
    detail::run_row<Sizes...>(ptr, 1, std::array<int64_t, K>{}, std::make_index_sequence<K>{}, f);
    return;
  }

  const size_t inner = sizes.size() - 1;
  std::vector<int64_t> index(sizes.size(), 0);
  for (;;) {
    detail::run_row<Sizes...>(ptr, sizes[inner], strides[inner], std::make_index_sequence<K>{}, f);
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
