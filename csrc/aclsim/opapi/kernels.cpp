// Implementations of the strided elementwise kernels (see kernels.h).
#include "kernels.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "convert.h"
#include "dtype.h"

namespace aclsim::opapi {

namespace {

// Unaligned-safe element access.
template <class T>
inline T read(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
inline void write(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

template <class M> constexpr aclDataType dtype_of();
template <> constexpr aclDataType dtype_of<float>() { return ACL_FLOAT; }
template <> constexpr aclDataType dtype_of<double>() { return ACL_DOUBLE; }
template <> constexpr aclDataType dtype_of<int64_t>() { return ACL_INT64; }

// A scalar as a value of the computation type M (float, double or int64).
template <class M>
M scalar_as(const ScalarValue& s) {
  M m{};
  convert_scalar(s, dtype_of<M>(), &m);
  return m;
}

// True when `op` walks `shape` densely in row-major order.
bool is_dense(const Operand& op, const std::vector<int64_t>& shape) {
  int64_t expected = static_cast<int64_t>(element_size(op.dtype));
  for (size_t i = shape.size(); i > 0; --i) {
    if (shape[i - 1] != 1 && op.byte_strides[i - 1] != expected) return false;
    expected *= shape[i - 1];
  }
  return true;
}

// Integer arithmetic that wraps instead of overflowing (as the hardware and
// PyTorch's CPU kernels do).
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

template <class M>
inline M apply(ArithOp op, M x, M y, M alpha) {
  if constexpr (std::is_floating_point_v<M>) {
    switch (op) {
      case ArithOp::Add: return alpha == M(1) ? x + y : std::fma(alpha, y, x);
      case ArithOp::Sub: return alpha == M(1) ? x - y : std::fma(-alpha, y, x);
      case ArithOp::Mul: return x * y;
      case ArithOp::Div: return x / y;
    }
  } else {
    switch (op) {
      case ArithOp::Add: return wrap_add(x, wrap_mul(alpha, y));
      case ArithOp::Sub: return wrap_sub(x, wrap_mul(alpha, y));
      case ArithOp::Mul: return wrap_mul(x, y);
      case ArithOp::Div:  // never requested: integral division promotes to float
        return y == 0 ? 0 : (y == -1 ? wrap_sub(0, x) : x / y);
    }
  }
  return M{};
}

}  // namespace

void convert_scalar(const ScalarValue& in, aclDataType to, void* out) {
  dispatch_dtype(to, [&](auto d) {
    using D = decltype(d);
    dispatch_dtype(in.dtype, [&](auto s) {
      using S = decltype(s);
      const D value = convert<D>(read<S>(reinterpret_cast<const char*>(in.bytes.data())));
      std::memcpy(out, &value, sizeof(D));
    });
  });
}

Materialized materialize(const TensorDesc& t, aclDataType dtype) {
  Materialized m;
  const int64_t n = t.numel();
  m.storage.resize(static_cast<size_t>(n) * element_size(dtype));
  m.desc.dtype = dtype;
  m.desc.shape = t.shape;
  m.desc.strides.assign(t.shape.size(), 1);
  for (size_t i = t.shape.size(); i > 1; --i) {
    m.desc.strides[i - 2] = m.desc.strides[i - 1] * t.shape[i - 1];
  }
  m.desc.storage_shape = {n};
  m.desc.data = m.storage.data();
  if (n > 0) {
    cast_kernel(make_operand(m.desc, t.shape), make_operand(t, t.shape), t.shape);
  }
  return m;
}

void cast_kernel(const Operand& dst, const Operand& src, const std::vector<int64_t>& shape) {
  if (dst.dtype == src.dtype && is_dense(dst, shape) && is_dense(src, shape)) {
    std::memmove(dst.base, src.base, static_cast<size_t>(shape_numel(shape)) * element_size(dst.dtype));
    return;
  }
  dispatch_dtype(dst.dtype, [&](auto d) {
    using D = decltype(d);
    dispatch_dtype(src.dtype, [&](auto s) {
      using S = decltype(s);
      for_each_element<2>(shape, {&dst, &src}, [](const std::array<char*, 2>& p) {
        if constexpr (std::is_same_v<D, S>) {
          std::memcpy(p[0], p[1], sizeof(D));  // same dtype: keep the bits
        } else {
          write<D>(p[0], convert<D>(read<S>(p[1])));
        }
      });
    });
  });
}

void fill_kernel(const Operand& dst, const std::vector<int64_t>& shape, const ScalarValue& value) {
  unsigned char bytes[16] = {};
  convert_scalar(value, dst.dtype, bytes);
  const size_t size = element_size(dst.dtype);
  bool all_zero = true;
  for (size_t i = 0; i < size; ++i) all_zero = all_zero && bytes[i] == 0;
  if (all_zero && is_dense(dst, shape)) {
    std::memset(dst.base, 0, static_cast<size_t>(shape_numel(shape)) * size);
    return;
  }
  for_each_element<1>(shape, {&dst}, [&](const std::array<char*, 1>& p) {
    std::memcpy(p[0], bytes, size);
  });
}

void arith_kernel(ArithOp op, const Operand& out, const Input& a, const Input& b,
                  const ScalarValue& alpha, const std::vector<int64_t>& shape) {
  dispatch_dtype(out.dtype, [&](auto o) {
    using T = decltype(o);
    using M = opmath_t<T>;
    const M alpha_m = scalar_as<M>(alpha);
    auto put = [](char* p, M r) { write<T>(p, store<T>(value_cast<natural_t<T>>(r))); };
    auto get = [](const char* p) { return value_cast<M>(load(read<T>(p))); };
    if (!a.is_scalar && !b.is_scalar) {
      for_each_element<3>(shape, {&out, &a.tensor, &b.tensor}, [&](const std::array<char*, 3>& p) {
        put(p[0], apply<M>(op, get(p[1]), get(p[2]), alpha_m));
      });
    } else if (!a.is_scalar) {
      const M y = scalar_as<M>(b.scalar);
      for_each_element<2>(shape, {&out, &a.tensor}, [&](const std::array<char*, 2>& p) {
        put(p[0], apply<M>(op, get(p[1]), y, alpha_m));
      });
    } else if (!b.is_scalar) {
      const M x = scalar_as<M>(a.scalar);
      for_each_element<2>(shape, {&out, &b.tensor}, [&](const std::array<char*, 2>& p) {
        put(p[0], apply<M>(op, x, get(p[1]), alpha_m));
      });
    } else {
      const M r = apply<M>(op, scalar_as<M>(a.scalar), scalar_as<M>(b.scalar), alpha_m);
      for_each_element<1>(shape, {&out}, [&](const std::array<char*, 1>& p) { put(p[0], r); });
    }
  });
}

void eq_kernel(const Operand& out, const Operand& a, const Input& b,
               const std::vector<int64_t>& shape) {
  dispatch_dtype(out.dtype, [&](auto o) {
    using O = decltype(o);
    dispatch_dtype(a.dtype, [&](auto c) {
      using C = decltype(c);
      using M = opmath_t<C>;
      auto put = [](char* p, bool r) { write<O>(p, store<O>(value_cast<natural_t<O>>(r))); };
      auto get = [](const char* p) { return value_cast<M>(load(read<C>(p))); };
      if (b.is_scalar) {
        // The scalar takes the compute dtype first (0.1 vs float16 compares
        // against float16(0.1)).
        C y_stored{};
        convert_scalar(b.scalar, a.dtype, &y_stored);
        const M y = value_cast<M>(load(y_stored));
        for_each_element<2>(shape, {&out, &a}, [&](const std::array<char*, 2>& p) {
          put(p[0], get(p[1]) == y);
        });
      } else {
        for_each_element<3>(shape, {&out, &a, &b.tensor}, [&](const std::array<char*, 3>& p) {
          put(p[0], get(p[1]) == get(p[2]));
        });
      }
    });
  });
}

void arange_kernel(const Operand& out, int64_t n, const ScalarValue& start, const ScalarValue& step) {
  dispatch_dtype(out.dtype, [&](auto o) {
    using T = decltype(o);
    // PyTorch's CPU accumulation type for arange.
    using A = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, double,
                                 opmath_t<T>>;
    const A first = scalar_as<A>(start);
    const A delta = scalar_as<A>(step);
    const std::vector<int64_t> shape{n};
    int64_t i = 0;
    for_each_element<1>(shape, {&out}, [&](const std::array<char*, 1>& p) {
      A v;
      if constexpr (std::is_floating_point_v<A>) {
        v = first + delta * static_cast<A>(i);
      } else {
        v = wrap_add(first, wrap_mul(delta, i));
      }
      ++i;
      write<T>(p[0], store<T>(value_cast<natural_t<T>>(v)));
    });
  });
}

}  // namespace aclsim::opapi
