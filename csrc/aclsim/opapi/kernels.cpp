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

// Calls run(fn) with fn(x, y) the operation in the computation type M, the
// operation and alpha fixed outside the element loop.
template <class M, class Run>
void with_op(ArithOp op, M alpha, Run&& run) {
  if constexpr (std::is_floating_point_v<M>) {
    switch (op) {
      case ArithOp::Add:
        if (alpha == M(1)) return run([](M x, M y) { return x + y; });
        return run([alpha](M x, M y) { return std::fma(alpha, y, x); });
      case ArithOp::Sub:
        if (alpha == M(1)) return run([](M x, M y) { return x - y; });
        return run([alpha](M x, M y) { return std::fma(-alpha, y, x); });
      case ArithOp::Mul: return run([](M x, M y) { return x * y; });
      case ArithOp::Div: return run([](M x, M y) { return x / y; });
    }
  } else {
    switch (op) {
      case ArithOp::Add: return run([alpha](M x, M y) { return wrap_add(x, wrap_mul(alpha, y)); });
      case ArithOp::Sub: return run([alpha](M x, M y) { return wrap_sub(x, wrap_mul(alpha, y)); });
      case ArithOp::Mul: return run([](M x, M y) { return wrap_mul(x, y); });
      case ArithOp::Div:  // never requested: integral division promotes to float
        return run([](M x, M y) { return y == 0 ? M(0) : (y == -1 ? wrap_sub(0, x) : x / y); });
    }
  }
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

Materialized allocate_contiguous(const std::vector<int64_t>& shape, aclDataType dtype) {
  Materialized m;
  const int64_t n = shape_numel(shape);
  m.storage.resize(static_cast<size_t>(n) * element_size(dtype));
  m.desc.dtype = dtype;
  m.desc.shape = shape;
  m.desc.strides.assign(shape.size(), 1);
  for (size_t i = shape.size(); i > 1; --i) {
    m.desc.strides[i - 2] = m.desc.strides[i - 1] * shape[i - 1];
  }
  m.desc.storage_shape = {n};
  m.desc.data = m.storage.data();
  return m;
}

Materialized materialize(const TensorDesc& t, aclDataType dtype) {
  Materialized m = allocate_contiguous(t.shape, dtype);
  if (t.numel() > 0) {
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
      for_each_element<sizeof(D), sizeof(S)>(shape, {&dst, &src}, [](char* to, char* from) {
        if constexpr (std::is_same_v<D, S>) {
          std::memcpy(to, from, sizeof(D));  // same dtype: keep the bits
        } else {
          write<D>(to, convert<D>(read<S>(from)));
        }
      });
    });
  });
}

void fill_kernel(const Operand& dst, const std::vector<int64_t>& shape, const ScalarValue& value) {
  dispatch_dtype(dst.dtype, [&](auto d) {
    using D = decltype(d);
    D v{};
    convert_scalar(value, dst.dtype, &v);
    unsigned char bytes[sizeof(D)];
    std::memcpy(bytes, &v, sizeof(D));
    bool all_zero = true;
    for (unsigned char byte : bytes) all_zero = all_zero && byte == 0;
    if (all_zero && is_dense(dst, shape)) {
      std::memset(dst.base, 0, static_cast<size_t>(shape_numel(shape)) * sizeof(D));
      return;
    }
    for_each_element<sizeof(D)>(shape, {&dst}, [v](char* to) { write<D>(to, v); });
  });
}

void arith_kernel(ArithOp op, const Operand& out, const Input& a, const Input& b,
                  const ScalarValue& alpha, const std::vector<int64_t>& shape) {
  dispatch_dtype(out.dtype, [&](auto o) {
    using T = decltype(o);
    using M = opmath_t<T>;
    auto put = [](char* p, M r) { write<T>(p, store<T>(value_cast<natural_t<T>>(r))); };
    auto get = [](const char* p) { return value_cast<M>(load(read<T>(p))); };
    with_op<M>(op, scalar_as<M>(alpha), [&](auto fn) {
      if (!a.is_scalar && !b.is_scalar) {
        for_each_element<sizeof(T), sizeof(T), sizeof(T)>(
            shape, {&out, &a.tensor, &b.tensor},
            [&](char* o, char* x, char* y) { put(o, fn(get(x), get(y))); });
      } else if (!a.is_scalar) {
        const M y = scalar_as<M>(b.scalar);
        for_each_element<sizeof(T), sizeof(T)>(shape, {&out, &a.tensor},
                                               [&](char* o, char* x) { put(o, fn(get(x), y)); });
      } else if (!b.is_scalar) {
        const M x = scalar_as<M>(a.scalar);
        for_each_element<sizeof(T), sizeof(T)>(shape, {&out, &b.tensor},
                                               [&](char* o, char* y) { put(o, fn(x, get(y))); });
      } else {
        const M r = fn(scalar_as<M>(a.scalar), scalar_as<M>(b.scalar));
        for_each_element<sizeof(T)>(shape, {&out}, [&](char* o) { put(o, r); });
      }
    });
  });
}

namespace {

template <class M>
inline bool compare(CompareOp op, M x, M y) {
  switch (op) {
    case CompareOp::Eq: return x == y;
    case CompareOp::Ne: return x != y;
    case CompareOp::Lt: return x < y;
    case CompareOp::Le: return x <= y;
    case CompareOp::Gt: return x > y;
    case CompareOp::Ge: return x >= y;
  }
  return false;
}

}  // namespace

void compare_kernel(CompareOp op, const Operand& out, const Operand& a, const Input& b,
                    const std::vector<int64_t>& shape) {
  dispatch_dtype(a.dtype, [&](auto c) {
    using C = decltype(c);
    using M = opmath_t<C>;
    auto get = [](const char* p) { return value_cast<M>(load(read<C>(p))); };
    if (b.is_scalar) {
      // The scalar takes the compute dtype first (0.1 vs float16 compares
      // against float16(0.1)).
      C y_stored{};
      convert_scalar(b.scalar, a.dtype, &y_stored);
      const M y = value_cast<M>(load(y_stored));
      for_each_element<1, sizeof(C)>(shape, {&out, &a}, [&](char* o, char* x) {
        write<b8>(o, store<b8>(compare(op, get(x), y)));
      });
    } else {
      for_each_element<1, sizeof(C), sizeof(C)>(shape, {&out, &a, &b.tensor}, [&](char* o, char* x, char* y) {
        write<b8>(o, store<b8>(compare(op, get(x), get(y))));
      });
    }
  });
}

void unary_kernel(UnaryOp op, const Operand& out, const Operand& a, const std::vector<int64_t>& shape) {
  dispatch_dtype(a.dtype, [&](auto c) {
    using T = decltype(c);
    using M = opmath_t<T>;
    auto run = [&](auto fn) {
      for_each_element<sizeof(T), sizeof(T)>(shape, {&out, &a}, [&](char* o, char* x) {
        write<T>(o, store<T>(value_cast<natural_t<T>>(fn(value_cast<M>(load(read<T>(x)))))));
      });
    };
    if constexpr (std::is_floating_point_v<M>) {
      switch (op) {
        case UnaryOp::Abs: return run([](M x) { return std::fabs(x); });
        case UnaryOp::Neg: return run([](M x) { return -x; });
        case UnaryOp::Ceil: return run([](M x) { return std::ceil(x); });
      }
    } else {
      switch (op) {
        case UnaryOp::Abs: return run([](M x) { return x < 0 ? wrap_sub(0, x) : x; });
        case UnaryOp::Neg: return run([](M x) { return wrap_sub(0, x); });
        case UnaryOp::Ceil: return run([](M x) { return x; });
      }
    }
  });
}

void isclose_kernel(const Operand& out, const Operand& a, const Operand& b, double rtol, double atol,
                    bool equal_nan, const std::vector<int64_t>& shape) {
  dispatch_dtype(a.dtype, [&](auto c) {
    using T = decltype(c);
    using M = opmath_t<T>;
    if constexpr (std::is_floating_point_v<M>) {
      const M rt = static_cast<M>(rtol);
      const M at = static_cast<M>(atol);
      auto get = [](const char* p) { return value_cast<M>(load(read<T>(p))); };
      for_each_element<1, sizeof(T), sizeof(T)>(shape, {&out, &a, &b}, [&](char* o, char* x, char* y) {
        const M u = get(x);
        const M v = get(y);
        bool close = u == v;  // also equal infinities
        if (std::isnan(u) || std::isnan(v)) {
          close = equal_nan && std::isnan(u) && std::isnan(v);
        } else if (!close && std::isfinite(u) && std::isfinite(v)) {
          close = std::fabs(u - v) <= at + rt * std::fabs(v);
        }
        write<b8>(o, store<b8>(close));
      });
    } else {
      throw_invalid("isclose computes in a floating dtype, not " + dtype_name(a.dtype));
    }
  });
}

void isfinite_kernel(const Operand& out, const Operand& a, const std::vector<int64_t>& shape) {
  dispatch_dtype(a.dtype, [&](auto c) {
    using T = decltype(c);
    for_each_element<1, sizeof(T)>(shape, {&out, &a}, [&](char* o, char* x) {
      if constexpr (std::is_floating_point_v<natural_t<T>>) {
        write<b8>(o, store<b8>(std::isfinite(load(read<T>(x)))));
      } else {
        (void)x;
        write<b8>(o, store<b8>(true));
      }
    });
  });
}

void bitwise_kernel(BitwiseOp op, const Operand& out, const Operand& a, const Input& b,
                    const std::vector<int64_t>& shape) {
  dispatch_dtype(out.dtype, [&](auto o) {
    using T = decltype(o);
    if constexpr (std::is_floating_point_v<natural_t<T>>) {
      throw_invalid("bitwise operations need integral or bool operands, not " + dtype_name(out.dtype));
    } else {
      using M = opmath_t<T>;  // int64
      auto get = [](const char* p) { return value_cast<M>(load(read<T>(p))); };
      auto put = [](char* p, M r) { write<T>(p, store<T>(value_cast<natural_t<T>>(r))); };
      auto run = [&](auto fn) {
        if (b.is_scalar) {
          T y_stored{};
          convert_scalar(b.scalar, out.dtype, &y_stored);
          const M y = value_cast<M>(load(y_stored));
          for_each_element<sizeof(T), sizeof(T)>(shape, {&out, &a},
                                                 [&](char* r, char* x) { put(r, fn(get(x), y)); });
        } else {
          for_each_element<sizeof(T), sizeof(T), sizeof(T)>(
              shape, {&out, &a, &b.tensor}, [&](char* r, char* x, char* y) { put(r, fn(get(x), get(y))); });
        }
      };
      switch (op) {
        case BitwiseOp::And: return run([](M x, M y) { return x & y; });
        case BitwiseOp::Or: return run([](M x, M y) { return x | y; });
        case BitwiseOp::Xor: return run([](M x, M y) { return x ^ y; });
      }
    }
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
    for_each_element<sizeof(T)>(shape, {&out}, [&](char* o) {
      A v;
      if constexpr (std::is_floating_point_v<A>) {
        v = first + delta * static_cast<A>(i);
      } else {
        v = wrap_add(first, wrap_mul(delta, i));
      }
      ++i;
      write<T>(o, store<T>(value_cast<natural_t<T>>(v)));
    });
  });
}

}  // namespace aclsim::opapi
