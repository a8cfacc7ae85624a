#include "cpu/reduce_kernels.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

// The kernels are memory-bound loops; the clones let GCC pick wide vectors at run time without
// tying the binary to the build machine's instruction set.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define COHORT_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define COHORT_KERNEL
#endif

namespace cohort::detail {
namespace {

// Elements per block of the multi-source fold: the accumulator stays in L1.
constexpr size_t kBlock = 2048;

struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct Min {
  template <typename T>
  T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct Or {
  template <typename T>
  T operator()(T a, T b) const {
    return a | b;
  }
};

template <typename T, typename F>
inline __attribute__((always_inline)) void fold(T* dst, const T* const* srcs, int nsrc,
                                                size_t count, F f) {
  if (nsrc == 1) {
    if (dst != srcs[0]) std::memmove(dst, srcs[0], count * sizeof(T));
    return;
  }
  if (nsrc == 2) {
    const T* a = srcs[0];
    const T* b = srcs[1];
    for (size_t i = 0; i < count; ++i) dst[i] = f(a[i], b[i]);
    return;
  }
  alignas(64) T acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    const T* s0 = srcs[0] + base;
    for (size_t i = 0; i < m; ++i) acc[i] = s0[i];
    for (int k = 1; k < nsrc; ++k) {
      const T* s = srcs[k] + base;
      for (size_t i = 0; i < m; ++i) acc[i] = f(acc[i], s[i]);
    }
    T* d = dst + base;
    for (size_t i = 0; i < m; ++i) d[i] = acc[i];
  }
}

inline float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16;
  const uint32_t nan = (u >> 16) | 0x0040;
  return static_cast<uint16_t>((u & 0x7FFFFFFF) > 0x7F800000 ? nan : rounded);
}

// bfloat16: accumulate a block in float over every source, round once.
template <typename F>
inline __attribute__((always_inline)) void fold_bf16(uint16_t* dst, const uint16_t* const* srcs,
                                                     int nsrc, size_t count, F f) {
  alignas(64) float acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    const uint16_t* s0 = srcs[0] + base;
    for (size_t i = 0; i < m; ++i) acc[i] = bf16_to_float(s0[i]);
    for (int k = 1; k < nsrc; ++k) {
      const uint16_t* s = srcs[k] + base;
      for (size_t i = 0; i < m; ++i) acc[i] = f(acc[i], bf16_to_float(s[i]));
    }
    uint16_t* d = dst + base;
    for (size_t i = 0; i < m; ++i) d[i] = float_to_bf16(acc[i]);
  }
}

template <typename T>
inline __attribute__((always_inline)) void fold_op(T* dst, const T* const* srcs, int nsrc,
                                                   size_t count, Op op) {
  switch (op) {
    case Op::kSum:
      return fold(dst, srcs, nsrc, count, Sum{});
    case Op::kMin:
      return fold(dst, srcs, nsrc, count, Min{});
    case Op::kMax:
      return fold(dst, srcs, nsrc, count, Max{});
    case Op::kBitOr:
      break;  // handled on bytes by reduce()
  }
}

COHORT_KERNEL void reduce_f32(float* d, const float* const* s, int n, size_t c, Op op) {
  fold_op(d, s, n, c, op);
}
COHORT_KERNEL void reduce_f64(double* d, const double* const* s, int n, size_t c, Op op) {
  fold_op(d, s, n, c, op);
}
COHORT_KERNEL void reduce_i32(int32_t* d, const int32_t* const* s, int n, size_t c, Op op) {
  fold_op(d, s, n, c, op);
}
COHORT_KERNEL void reduce_i64(int64_t* d, const int64_t* const* s, int n, size_t c, Op op) {
  fold_op(d, s, n, c, op);
}
COHORT_KERNEL void reduce_bf16(uint16_t* d, const uint16_t* const* s, int n, size_t c, Op op) {
  switch (op) {
    case Op::kSum:
      return fold_bf16(d, s, n, c, Sum{});
    case Op::kMin:
      return fold_bf16(d, s, n, c, Min{});
    case Op::kMax:
      return fold_bf16(d, s, n, c, Max{});
    case Op::kBitOr:
      break;
  }
}
COHORT_KERNEL void reduce_or64(uint64_t* d, const uint64_t* const* s, int n, size_t c) {
  fold(d, s, n, c, Or{});
}
COHORT_KERNEL void reduce_or8(uint8_t* d, const uint8_t* const* s, int n, size_t c) {
  fold(d, s, n, c, Or{});
}

template <typename T>
const T* const* as(const void* const* srcs) {
  return reinterpret_cast<const T* const*>(srcs);
}

}  // namespace

void reduce(void* dst, const void* const* srcs, int nsrc, size_t count, DataType type, Op op) {
  if (count == 0) return;
  if (op == Op::kBitOr) {
    const size_t bytes = count * dtype_size(type);
    bool words = bytes % 8 == 0 && reinterpret_cast<uintptr_t>(dst) % 8 == 0;
    for (int k = 0; k < nsrc; ++k) words = words && reinterpret_cast<uintptr_t>(srcs[k]) % 8 == 0;
    if (words) {
      reduce_or64(static_cast<uint64_t*>(dst), as<uint64_t>(srcs), nsrc, bytes / 8);
    } else {
      reduce_or8(static_cast<uint8_t*>(dst), as<uint8_t>(srcs), nsrc, bytes);
    }
    return;
  }
  switch (type) {
    case DataType::kFloat32:
      return reduce_f32(static_cast<float*>(dst), as<float>(srcs), nsrc, count, op);
    case DataType::kFloat64:
      return reduce_f64(static_cast<double*>(dst), as<double>(srcs), nsrc, count, op);
    case DataType::kBFloat16:
      return reduce_bf16(static_cast<uint16_t*>(dst), as<uint16_t>(srcs), nsrc, count, op);
    case DataType::kInt32:
      return reduce_i32(static_cast<int32_t*>(dst), as<int32_t>(srcs), nsrc, count, op);
    case DataType::kInt64:
      return reduce_i64(static_cast<int64_t*>(dst), as<int64_t>(srcs), nsrc, count, op);
  }
}

void divide(void* data, size_t count, DataType type, int divisor) {
  if (divisor == 1 || count == 0) return;
  switch (type) {
    case DataType::kFloat32: {
      float* p = static_cast<float*>(data);
      const float d = static_cast<float>(divisor);
      for (size_t i = 0; i < count; ++i) p[i] /= d;
      return;
    }
    case DataType::kFloat64: {
      double* p = static_cast<double*>(data);
      const double d = divisor;
      for (size_t i = 0; i < count; ++i) p[i] /= d;
      return;
    }
    case DataType::kBFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      const float d = static_cast<float>(divisor);
      for (size_t i = 0; i < count; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / d);
      return;
    }
    case DataType::kInt32: {
      int32_t* p = static_cast<int32_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= divisor;
      return;
    }
    case DataType::kInt64: {
      int64_t* p = static_cast<int64_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= divisor;
      return;
    }
  }
}

}  // namespace cohort::detail
