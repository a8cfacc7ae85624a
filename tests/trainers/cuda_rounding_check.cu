#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "cohort/error.h"
#include "cuda_rounding_check.h"
#include "rounding.h"

namespace cohort::train::testing {
namespace {

struct Counts {
  unsigned long long bf16, fp16;
  unsigned first_bf16, first_fp16;
};

__device__ bool same(uint16_t a, uint16_t b, bool nan_16_a, bool nan_16_b) {
  return (nan_16_a && nan_16_b) || a == b;
}

// Patterns [base, base + 2^31) in a grid-stride loop.
__global__ void compare_kernel(Counts* c, unsigned base) {
  const unsigned stride = gridDim.x * blockDim.x;
  for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < (1u << 31); k += stride) {
    const unsigned bits = base + k;
    const float x = __uint_as_float(bits);
    const uint16_t ours_b = rounding::bf16_from_bits(bits);
    const uint16_t hw_b = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    const bool nan_b = (ours_b & 0x7f80u) == 0x7f80u && (ours_b & 0x7fu);
    const bool hw_nan_b = (hw_b & 0x7f80u) == 0x7f80u && (hw_b & 0x7fu);
    if (!same(ours_b, hw_b, nan_b, hw_nan_b)) {
      atomicAdd(&c->bf16, 1ull);
      atomicMin(&c->first_bf16, bits);
    }
    const uint16_t ours_h = rounding::fp16_from_bits(bits);
    const uint16_t hw_h = __half_as_ushort(__float2half_rn(x));
    const bool nan_h = (ours_h & 0x7c00u) == 0x7c00u && (ours_h & 0x3ffu);
    const bool hw_nan_h = (hw_h & 0x7c00u) == 0x7c00u && (hw_h & 0x3ffu);
    if (!same(ours_h, hw_h, nan_h, hw_nan_h)) {
      atomicAdd(&c->fp16, 1ull);
      atomicMin(&c->first_fp16, bits);
    }
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

RoundingMismatches count_rounding_mismatches_on_gpu() {
  Counts* d = nullptr;
  check(cudaMalloc(&d, sizeof(Counts)), "cudaMalloc");
  const Counts init{0, 0, 0xffffffffu, 0xffffffffu};
  check(cudaMemcpy(d, &init, sizeof init, cudaMemcpyHostToDevice), "cudaMemcpy");
  for (unsigned half = 0; half < 2; ++half) {
    compare_kernel<<<4096, 256>>>(d, half << 31);
    check(cudaGetLastError(), "compare_kernel");
  }
  Counts c{};
  const cudaError_t e = cudaMemcpy(&c, d, sizeof c, cudaMemcpyDeviceToHost);
  cudaFree(d);
  check(e, "cudaMemcpy");
  return RoundingMismatches{c.bf16, c.fp16, c.first_bf16, c.first_fp16};
}

}  // namespace cohort::train::testing
