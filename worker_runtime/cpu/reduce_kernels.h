// Element-wise reductions over contiguous buffers: the arithmetic of every CPU collective.
//
// reduce() combines several source buffers into a destination in one pass, so a shared-memory
// owner can fold all its peers' slices at once (bfloat16 accumulates in float and rounds once).
// The result for a given list of sources is the same on every rank and every call: sources are
// folded in list order with the same code, so every rank of a collective ends bit-identical.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>

#include "cohort/types.h"

namespace cohort::detail {

// The operator a kernel applies. Avg is Sum followed by divide(); BitOr works on the raw bytes
// (broadcast and allgather are built on it where only an allreduce is available).
enum class Op : unsigned char { kSum, kMin, kMax, kBitOr };

inline Op kernel_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return Op::kMin;
    case ReduceOp::kMax:
      return Op::kMax;
    default:
      return Op::kSum;
  }
}

// dst[i] = op(srcs[0][i], ..., srcs[nsrc-1][i]) for i < count. dst may be one of the sources.
// REQUIRES: nsrc >= 1; buffers hold `count` elements of `type`.
void reduce(void* dst, const void* const* srcs, int nsrc, size_t count, DataType type, Op op);

// Two-source shorthand: dst = op(a, b).
inline void reduce2(void* dst, const void* a, const void* b, size_t count, DataType type, Op op) {
  const void* srcs[2] = {a, b};
  reduce(dst, srcs, 2, count, type, op);
}

// data[i] /= divisor: the second half of Avg. Integers truncate toward zero, bfloat16 divides in
// float and rounds to nearest even.
void divide(void* data, size_t count, DataType type, int divisor);

}  // namespace cohort::detail
