// GEMM operands on the GPU: an fp32 value rounded to the precision (precision.h) and stored as
// cuBLASLt reads it: fp32 as it is, tf32 as an fp32 value with the low 13 mantissa bits cleared
// (rounded to nearest even first, so that the tensor cores' own conversion changes nothing),
// bf16 and fp16 as their 16-bit encodings. The rounding is rounding.h's, the CPU's bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "cohort/train/precision.h"
#include "rounding.h"

namespace cohort::train::cuda {

// Bytes of one stored operand element.
inline size_t operand_element_bytes(Precision p) {
  return p == Precision::kBf16 || p == Precision::kFp16 ? 2 : 4;
}
// Scratch bytes for a rounded copy of n elements: none in fp32, whose GEMMs read the fp32 values.
inline size_t operand_scratch_bytes(Precision p, size_t n) {
  return p == Precision::kFp32 ? 0 : n * operand_element_bytes(p);
}
// What a GEMM reads for `src`: src itself in fp32, else its rounded copy in `scratch`.
inline const void* operand_or(Precision p, const float* src, const void* scratch) {
  return p == Precision::kFp32 ? static_cast<const void*>(src) : scratch;
}

// Element i of a stored operand array, from fp32 x.
__device__ __forceinline__ void store_operand(Precision p, void* dst, size_t i, float x) {
  const uint32_t b = __float_as_uint(x);
  switch (p) {
    case Precision::kFp32:
      static_cast<float*>(dst)[i] = x;
      break;
    case Precision::kTf32:
      static_cast<uint32_t*>(dst)[i] = rounding::tf32_rounded_bits(b);
      break;
    case Precision::kBf16:
      static_cast<uint16_t*>(dst)[i] = rounding::bf16_from_bits(b);
      break;
    case Precision::kFp16:
      static_cast<uint16_t*>(dst)[i] = rounding::fp16_from_bits(b);
      break;
  }
}

struct OperandJob {
  const float* src;
  void* dst;
  size_t n;
};

// dst = src rounded to p, for up to 4 arrays in one launch. Nothing in fp32 (no copies are made).
void round_operands(Precision p, std::initializer_list<OperandJob> jobs, cudaStream_t stream);

}  // namespace cohort::train::cuda
