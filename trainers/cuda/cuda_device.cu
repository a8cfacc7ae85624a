// CudaDevice: the Device whose methods are the launchers of this folder, on one stream with one
// cuBLAS handle bound to it.
#include <cctype>
#include <cstdio>
#include <string>

#include "cohort/train/device.h"
#include "cuda/attention.cuh"
#include "cuda/conv2d.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/embedding.cuh"
#include "cuda/layernorm.cuh"
#include "cuda/linear.cuh"
#include "cuda/maxpool.cuh"
#include "cuda/optim.cuh"
#include "cuda/softmax_xent.cuh"

namespace cohort::train {
namespace {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) : index_(index) {
    COHORT_CUDA_CHECK(cudaSetDevice(index));
    cudaDeviceProp prop{};
    COHORT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    name_ = prop.name;
    char bus[32] = {};
    COHORT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, index));
    pci_bus_id_ = bus;
    for (char& ch : pci_bus_id_)
      ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    COHORT_CUBLAS_CHECK(cublasCreate(&blas_));
    COHORT_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    // Plain FP32 GEMMs (no TF32), so results stay within float rounding of the CPU reference.
    COHORT_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    COHORT_CUDA_CHECK(
        cudaMalloc(&norm_scratch_, cuda::sum_squares_scratch_doubles() * sizeof(double)));
  }
  ~CudaDevice() override {
    cudaStreamSynchronize(stream_);
    cudaFree(norm_scratch_);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string describe() const override {
    return "cuda:" + std::to_string(index_) + " (" + name_ + ")";
  }
  void* native_stream() override { return stream_; }
  int cuda_index() const override { return index_; }
  std::string pci_bus_id() const override { return pci_bus_id_; }
  std::string why_unsupported(Precision p) const override {
    return p == Precision::kFp32 ? std::string()
                                 : std::string("the CUDA kernels run fp32 GEMMs only so far");
  }

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    COHORT_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
  }
  void release(void* p) noexcept override { cudaFree(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller may reuse src at once
  }
  void download(void* dst, const void* src, size_t bytes) override {
    COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void zero(void* p, size_t bytes) override {
    COHORT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  }
  void synchronize() override { COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC) override {
    cuda::linear_forward(out, inp, weight, bias, N, C, OC, stream_, blas_);
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC) override {
    cuda::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, stream_, blas_);
  }
  void conv2d_forward(float* out, float* col, const float* inp, const float* weight,
                      const float* bias, const Conv2dShape& s) override {
    cuda::conv2d_forward(out, col, inp, weight, bias, s, stream_, blas_);
  }
  void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, float* col, const float* weight,
                       const Conv2dShape& s) override {
    cuda::conv2d_backward(dinp, dweight, dbias, dout, inp, col, weight, s, stream_, blas_);
  }
  size_t conv2d_scratch_floats(const Conv2dShape& s) const override {
    return cuda::conv2d_scratch_floats(s);
  }
  void maxpool2x2_forward(float* out, uint8_t* argmax, const float* inp, int B, int H, int W,
                          int C) override {
    cuda::maxpool2x2_forward(out, argmax, inp, B, H, W, C, stream_);
  }
  void maxpool2x2_backward(float* dinp, const float* dout, const uint8_t* argmax, int B, int H,
                           int W, int C) override {
    cuda::maxpool2x2_backward(dinp, dout, argmax, B, H, W, C, stream_);
  }
  void relu_forward(float* out, const float* inp, size_t n) override {
    cuda::relu_forward(out, inp, n, stream_);
  }
  void relu_backward(float* dinp, const float* dout, const float* out, size_t n) override {
    cuda::relu_backward(dinp, dout, out, n, stream_);
  }
  void gelu_forward(float* out, const float* inp, size_t n) override {
    cuda::gelu_forward(out, inp, n, stream_);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    cuda::gelu_backward(dinp, inp, dout, n, stream_);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C) override {
    cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, stream_);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream_);
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override {
    cuda::embedding_forward(out, tokens, wte, wpe, B, T, C, stream_);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                          int T, int C, int V) override {
    cuda::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, V, stream_);
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                         int NH) override {
    cuda::attention_forward(out, att, qkv, B, T, C, NH, stream_, blas_);
  }
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH) override {
    cuda::attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH, stream_, blas_);
  }
  size_t attention_scratch_floats(int B, int T, int NH) const override {
    return cuda::attention_scratch_floats(B, T, NH);
  }
  void softmax_xent_forward(float* losses, float* probs, const float* logits,
                            const int32_t* targets, int N, int V) override {
    cuda::softmax_xent_forward(losses, probs, logits, targets, N, V, stream_);
  }
  void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets,
                             float dloss, int N, int V) override {
    cuda::softmax_xent_backward(dlogits, probs, targets, dloss, N, V, stream_);
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    cuda::residual_forward(out, a, b, n, stream_);
  }
  void sgd_step(float* params, float* buf, const float* grads, size_t n, const SgdParams& p,
                float grad_scale) override {
    cuda::sgd_step(params, buf, grads, n, p, grad_scale, stream_);
  }
  void adamw_step(float* params, float* m, float* v, const float* grads, size_t n, int64_t t,
                  const AdamWParams& p, float grad_scale) override {
    cuda::adamw_step(params, m, v, grads, n, t, p, grad_scale, stream_);
  }
  void ema_update(float* average, const float* x, size_t n, float decay) override {
    cuda::ema_update(average, x, n, decay, stream_);
  }
  double sum_squares(const float* x, size_t n) override {
    return cuda::sum_squares(x, n, norm_scratch_, stream_);
  }

 private:
  int index_;
  std::string name_;
  std::string pci_bus_id_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  double* norm_scratch_ = nullptr;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

bool cuda_device_available() {
  return cuda_device_count() > 0;
}

std::unique_ptr<Device> make_cuda_device(int index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    throw CudaError(std::string("no CUDA device available: ") +
                    (err != cudaSuccess ? cudaGetErrorString(err) : "none visible"));
  }
  if (index < 0 || index >= count) {
    throw CudaError(
        "cuda:" + std::to_string(index) + " is not a visible GPU: " + std::to_string(count) +
        (count == 1 ? " is" : " are") + " visible (cuda:0 to cuda:" + std::to_string(count - 1) +
        "; CUDA_VISIBLE_DEVICES narrows and renumbers them)");
  }
  return std::make_unique<CudaDevice>(index);
}

}  // namespace cohort::train
