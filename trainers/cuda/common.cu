#include "cuda/common.cuh"

namespace cohort::train::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed: " + cudaGetErrorString(err) + " (" + file + ":" +
                  std::to_string(line) + ")");
}

void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed: " + cublasGetStatusString(st) + " (" + file + ":" +
                  std::to_string(line) + ")");
}

namespace {
thread_local uint64_t g_launches = 0;
}  // namespace

uint64_t launch_count() {
  return g_launches;
}

void count_launch() {
  ++g_launches;
}

namespace {

__global__ void broadcast_rows_kernel(float* out, const float* bias, int N, int C) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < static_cast<size_t>(N) * C) out[i] = bias[i % C];
}

// Block (32, 8) covers 32 columns; the 8 rows of threads stride down the rows, then the partial
// sums meet in shared memory in a fixed order.
__global__ void column_sums_kernel(float* dsum, const float* x, int N, int C) {
  __shared__ float part[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += 8) s += x[static_cast<size_t>(n) * C + c];
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += part[k][threadIdx.x];
    dsum[c] += t;
  }
}

}  // namespace

void broadcast_rows(float* out, const float* bias, int N, int C, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(N) * C;
  if (n == 0) return;
  broadcast_rows_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, bias, N, C);
  COHORT_CUDA_CHECK_LAUNCH();
}

void column_sums_accumulate(float* dsum, const float* x, int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  column_sums_kernel<<<ceil_div(C, 32), dim3(32, 8), 0, stream>>>(dsum, x, N, C);
  COHORT_CUDA_CHECK_LAUNCH();
}

}  // namespace cohort::train::cuda
