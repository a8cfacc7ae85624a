// Private: the GEMM operands of the CPU layers, rounded to the device's precision (precision.h)
// in scratch buffers of the calling thread.
#pragma once

#include <cstddef>
#include <vector>

#include "cohort/train/precision.h"

namespace cohort::train::detail {

// `x` (n floats) rounded to `p` in this thread's scratch buffer number `slot` (0 to 3), or `x`
// itself for fp32. Valid until this thread's next call with the same slot.
inline const float* rounded_operand(int slot, Precision p, const float* x, size_t n) {
  if (p == Precision::kFp32) return x;
  thread_local std::vector<float> scratch[4];
  std::vector<float>& buf = scratch[slot];
  if (buf.size() < n) buf.resize(n);
  round_array(p, buf.data(), x, n);
  return buf.data();
}

}  // namespace cohort::train::detail
