// CudaDevice: the Device whose methods are the launchers of this folder, on one stream, with one
// cuBLASLt GEMM runner (and a cuBLAS handle for its fallback) and one scratch workspace bound to
// it.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cuda_profiler_api.h>

#include "cohort/train/device.h"
#include "cuda/attention.cuh"
#include "cuda/conv2d.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/embedding.cuh"
#include "cuda/gemm.cuh"
#include "cuda/layernorm.cuh"
#include "cuda/linear.cuh"
#include "cuda/maxpool.cuh"
#include "cuda/optim.cuh"
#include "cuda/softmax_xent.cuh"
#include "cuda/workspace.cuh"

namespace cohort::train {
namespace {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) : index_(index) {
    COHORT_CUDA_CHECK(cudaSetDevice(index));
    cudaDeviceProp prop{};
    COHORT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    name_ = prop.name;
    compute_capability_ = prop.major * 10 + prop.minor;
    char bus[32] = {};
    COHORT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, index));
    pci_bus_id_ = bus;
    for (char& ch : pci_bus_id_)
      ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    COHORT_CUBLAS_CHECK(cublasCreate(&blas_));
    COHORT_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    // The fallback's fp32 GEMMs stay fp32 (no TF32): the precision picks its compute type.
    COHORT_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    gemm_ = std::make_unique<cuda::Gemm>(stream_, blas_);
    workspace_ = std::make_unique<cuda::Workspace>(stream_);
    COHORT_CUDA_CHECK(
        cudaMalloc(&norm_scratch_, cuda::sum_squares_scratch_doubles() * sizeof(double)));
  }
  ~CudaDevice() override {
    cudaStreamSynchronize(stream_);
    workspace_.reset();
    gemm_.reset();
    for (auto& [layout, table] : adamw_tables_) cudaFree(table.pieces);
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
  // bf16 and tf32 tensor cores came with Ampere (compute capability 8.0), fp16's with Volta (7.0).
  std::string why_unsupported(Precision p) const override {
    const int need = p == Precision::kFp16 ? 70 : p == Precision::kFp32 ? 0 : 80;
    if (compute_capability_ >= need) return {};
    return std::string(precision_name(p)) + " GEMMs need compute capability " +
           std::to_string(need / 10) + "." + std::to_string(need % 10) + ", this GPU has " +
           std::to_string(compute_capability_ / 10) + "." +
           std::to_string(compute_capability_ % 10) + " (use --precision fp32" +
           (compute_capability_ >= 70 ? " or fp16)" : ")");
  }
  Precision default_precision() const override {
    return compute_capability_ >= 80 ? Precision::kBf16 : Precision::kFp32;
  }
  uint64_t launches() const override { return cuda::launch_count(); }
  void profile(bool on) override {
    COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    COHORT_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
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
    cuda::linear_forward(out, inp, weight, bias, N, C, OC, ctx());
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC) override {
    cuda::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, ctx());
  }
  void conv2d_forward(float* out, float* col, const float* inp, const float* weight,
                      const float* bias, const Conv2dShape& s) override {
    cuda::conv2d_forward(out, col, inp, weight, bias, s, ctx());
  }
  void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, float* col, const float* weight,
                       const Conv2dShape& s) override {
    cuda::conv2d_backward(dinp, dweight, dbias, dout, inp, col, weight, s, ctx());
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
    cuda::attention_forward(out, att, qkv, B, T, C, NH, ctx());
  }
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH) override {
    cuda::attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH, ctx());
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
  // One launch for every tensor: the pieces of the layout are uploaded once per layout.
  void adamw_step_layout(float* params, float* m, float* v, const float* grads,
                         const ParamLayout& layout, int64_t t, const AdamWParams& p,
                         float grad_scale) override {
    const AdamwTable& table = adamw_table(layout);
    cuda::adamw_step_pieces(params, m, v, grads, table.pieces, table.count, t, p, grad_scale,
                            stream_);
  }
  void ema_update(float* average, const float* x, size_t n, float decay) override {
    cuda::ema_update(average, x, n, decay, stream_);
  }
  double sum_squares(const float* x, size_t n) override {
    return cuda::sum_squares(x, n, norm_scratch_, stream_);
  }

 private:
  cuda::GemmContext ctx() const {
    return cuda::GemmContext{stream_, gemm_.get(), workspace_.get(), precision_};
  }

  struct AdamwTable {
    cuda::AdamwPiece* pieces = nullptr;  // device memory
    unsigned count = 0;
  };
  const AdamwTable& adamw_table(const ParamLayout& layout) {
    std::vector<uint64_t> key;  // the pieces depend on offsets, sizes and decay alone
    for (const ParamTensor& t : layout.tensors()) {
      key.insert(key.end(), {t.offset, t.numel, t.decay ? 1u : 0u});
    }
    auto it = adamw_tables_.find(key);
    if (it != adamw_tables_.end()) return it->second;
    std::vector<cuda::AdamwPiece> host;
    for (const ParamTensor& t : layout.tensors()) {
      for (size_t done = 0; done < t.numel; done += cuda::kAdamwPieceElements) {
        const size_t count = std::min<size_t>(cuda::kAdamwPieceElements, t.numel - done);
        host.push_back({t.offset + done, static_cast<uint32_t>(count), t.decay ? 1u : 0u});
      }
    }
    AdamwTable table;
    table.count = static_cast<unsigned>(host.size());
    if (!host.empty()) {
      COHORT_CUDA_CHECK(cudaMalloc(&table.pieces, host.size() * sizeof(cuda::AdamwPiece)));
      COHORT_CUDA_CHECK(cudaMemcpyAsync(table.pieces, host.data(),
                                        host.size() * sizeof(cuda::AdamwPiece),
                                        cudaMemcpyHostToDevice, stream_));
      COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    return adamw_tables_.emplace(key, table).first->second;
  }

  int index_;
  int compute_capability_ = 0;
  std::string name_;
  std::string pci_bus_id_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;
  std::unique_ptr<cuda::Workspace> workspace_;
  std::map<std::vector<uint64_t>, AdamwTable> adamw_tables_;
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
