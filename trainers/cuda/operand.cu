#include "cuda/common.cuh"
#include "cuda/operand.cuh"

namespace cohort::train::cuda {
namespace {

struct Jobs {
  OperandJob job[4];
};

// grid.y picks the array; the blocks of grid.x stride over it.
__global__ void round_operands_kernel(Precision p, Jobs jobs) {
  const OperandJob j = jobs.job[blockIdx.y];
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < j.n;
       i += stride) {
    store_operand(p, j.dst, i, j.src[i]);
  }
}

}  // namespace

void round_operands(Precision p, std::initializer_list<OperandJob> jobs, cudaStream_t stream) {
  if (p == Precision::kFp32) return;
  Jobs all{};
  unsigned count = 0;
  size_t longest = 0;
  for (const OperandJob& j : jobs) {
    if (j.n == 0) continue;
    if (count == 4) throw CudaError("round_operands: more than 4 arrays in one launch");
    all.job[count++] = j;
    longest = j.n > longest ? j.n : longest;
  }
  if (count == 0) return;
  // Enough blocks to cover the longest array up to 4 elements a thread, at most 4096 per array.
  const unsigned blocks = ceil_div(longest, 256 * 4) < 4096 ? ceil_div(longest, 256 * 4) : 4096;
  round_operands_kernel<<<dim3(blocks, count), 256, 0, stream>>>(p, all);
  COHORT_CUDA_CHECK_LAUNCH();
}

}  // namespace cohort::train::cuda
