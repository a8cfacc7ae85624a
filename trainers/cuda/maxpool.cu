#include "cuda/maxpool.cuh"

namespace cohort::train::cuda {
namespace {

// One thread per output element (B, OH, OW, C).
__global__ void maxpool_forward_kernel(float* out, uint8_t* argmax, const float* inp, int B, int H,
                                       int W, int C) {
  const int OH = H / 2, OW = W / 2;
  const size_t total = static_cast<size_t>(B) * OH * OW * C;
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const int c = static_cast<int>(i % C);
  const int ow = static_cast<int>((i / C) % OW);
  const int oh = static_cast<int>((i / (static_cast<size_t>(C) * OW)) % OH);
  const int b = static_cast<int>(i / (static_cast<size_t>(C) * OW * OH));
  const float* x = inp + ((static_cast<size_t>(b) * H + 2 * oh) * W + 2 * ow) * C + c;
  const size_t row = static_cast<size_t>(W) * C;
  const float v[4] = {x[0], x[C], x[row], x[row + C]};
  float m = v[0];
  uint8_t k = 0;
  for (uint8_t j = 1; j < 4; ++j) {
    if (v[j] > m) m = v[j], k = j;  // first maximum wins, as on the CPU
  }
  out[i] = m;
  argmax[i] = k;
}

// One thread per input element: its gradient if it won its window, else 0.
__global__ void maxpool_backward_kernel(float* dinp, const float* dout, const uint8_t* argmax,
                                        int B, int H, int W, int C) {
  const int OH = H / 2, OW = W / 2;
  const size_t total = static_cast<size_t>(B) * H * W * C;
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const int c = static_cast<int>(i % C);
  const int iw = static_cast<int>((i / C) % W);
  const int ih = static_cast<int>((i / (static_cast<size_t>(C) * W)) % H);
  const int b = static_cast<int>(i / (static_cast<size_t>(C) * W * H));
  const int oh = ih / 2, ow = iw / 2;
  float g = 0.0f;
  if (oh < OH && ow < OW) {
    const size_t o = ((static_cast<size_t>(b) * OH + oh) * OW + ow) * C + c;
    if (argmax[o] == (ih & 1) * 2 + (iw & 1)) g = dout[o];
  }
  dinp[i] = g;
}

}  // namespace

void maxpool2x2_forward(float* out, uint8_t* argmax, const float* inp, int B, int H, int W, int C,
                        cudaStream_t stream) {
  const size_t n = static_cast<size_t>(B) * (H / 2) * (W / 2) * C;
  if (n == 0) return;
  maxpool_forward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, argmax, inp, B, H, W, C);
  COHORT_CUDA_CHECK_LAUNCH();
}

void maxpool2x2_backward(float* dinp, const float* dout, const uint8_t* argmax, int B, int H, int W,
                         int C, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(B) * H * W * C;
  if (n == 0) return;
  maxpool_backward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dinp, dout, argmax, B, H, W, C);
  COHORT_CUDA_CHECK_LAUNCH();
}

}  // namespace cohort::train::cuda
