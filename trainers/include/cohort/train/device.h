// cohort::train::Device: where a model's buffers live and its layers run.
//
// The models (cnn.h, gpt.h) are written once against this interface. CpuDevice forwards every call
// to the CPU reference functions in layers/ (OpenBLAS for GEMMs); CudaDevice (built with CUDA)
// forwards to the launchers in cuda/ on one stream with one cuBLAS handle. Every layer method has
// exactly the CPU function's signature and conventions; pointers are device pointers. The GEMMs
// of the layer methods (linear, conv2d, attention) round their operands to the device's
// precision() (precision.h): CpuDevice in software, CudaDevice on tensor cores.
//
// Thread safety: a Device is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cohort/train/layers/conv2d.h"
#include "cohort/train/optim.h"
#include "cohort/train/param_layout.h"
#include "cohort/train/precision.h"

namespace cohort::train {

enum class DeviceKind { kCpu, kCuda };

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  // "cpu (OpenBLAS Cooperlake, 1 thread)", "cuda:0 (NVIDIA H200)".
  virtual std::string describe() const = 0;
  // The CUDA device index the Device runs on (-1 on the CPU). Whatever else works on this
  // Device's memory or stream (the NCCL group) must use this index.
  virtual int cuda_index() const { return -1; }
  // The GPU's PCI bus id, lower case ("0000:3b:00.0"); "" on the CPU. Two processes of one
  // machine share a GPU iff their ids are equal, whatever CUDA_VISIBLE_DEVICES numbered it.
  virtual std::string pci_bus_id() const { return {}; }

  // ---- precision of the layers' GEMMs (fp32 until set) ----
  // Why this device cannot run GEMMs in `p`, or "" when it can (the CPU emulates every format).
  virtual std::string why_unsupported(Precision p) const {
    (void)p;
    return {};
  }
  // bf16 on a GPU that has bf16 tensor cores, else fp32 (the CPU: emulation is slower than fp32).
  virtual Precision default_precision() const { return Precision::kFp32; }
  // Throws cohort::UsageError with why_unsupported(p) when the device cannot.
  void set_precision(Precision p);
  Precision precision() const { return precision_; }

  // Kernel launches and library calls (each GEMM counts one) queued on this device so far, for
  // counting them per step; 0 on the CPU.
  virtual uint64_t launches() const { return 0; }
  // Starts (true) or stops (false) a profiler's capture that waits for the application
  // (cudaProfilerStart/Stop: `ncu --profile-from-start off`, `nsys
  // --capture-range=cudaProfilerApi`); nothing on the CPU.
  virtual void profile(bool on) { (void)on; }

  // ---- memory (bytes) ----
  // Returns `bytes` of device memory (64-byte aligned); throws std::bad_alloc / CudaError.
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  // Waits for all queued work (a no-op on the CPU).
  virtual void synchronize() = 0;
  // The CUDA stream the device queues its work on (a cudaStream_t), nullptr on the CPU. A NCCL
  // group given this stream orders its collectives after the gradients are computed.
  virtual void* native_stream() { return nullptr; }

  // ---- layers: see layers/<name>.h ----
  virtual void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                              int N, int C, int OC) = 0;
  virtual void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int N, int C, int OC) = 0;
  virtual void conv2d_forward(float* out, float* col, const float* inp, const float* weight,
                              const float* bias, const Conv2dShape& s) = 0;
  virtual void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, float* col, const float* weight,
                               const Conv2dShape& s) = 0;
  // Scratch floats the conv2d methods need for `col` at this shape.
  virtual size_t conv2d_scratch_floats(const Conv2dShape& s) const = 0;
  virtual void maxpool2x2_forward(float* out, uint8_t* argmax, const float* inp, int B, int H,
                                  int W, int C) = 0;
  virtual void maxpool2x2_backward(float* dinp, const float* dout, const uint8_t* argmax, int B,
                                   int H, int W, int C) = 0;
  virtual void relu_forward(float* out, const float* inp, size_t n) = 0;
  virtual void relu_backward(float* dinp, const float* dout, const float* out, size_t n) = 0;
  virtual void gelu_forward(float* out, const float* inp, size_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) = 0;
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C) = 0;
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int B, int T, int C) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int B, int T, int C, int V) = 0;
  virtual void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                                 int NH) = 0;
  virtual void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                                  const float* att, int B, int T, int C, int NH) = 0;
  virtual void softmax_xent_forward(float* losses, float* probs, const float* logits,
                                    const int32_t* targets, int N, int V) = 0;
  virtual void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets,
                                     float dloss, int N, int V) = 0;
  virtual void residual_forward(float* out, const float* a, const float* b, size_t n) = 0;
  // Scratch floats attention_backward needs for `datt` at these sizes.
  virtual size_t attention_scratch_floats(int B, int T, int NH) const = 0;

  // ---- optimiser: see optim.h ----
  virtual void sgd_step(float* params, float* buf, const float* grads, size_t n, const SgdParams& p,
                        float grad_scale) = 0;
  virtual void adamw_step(float* params, float* m, float* v, const float* grads, size_t n,
                          int64_t t, const AdamWParams& p, float grad_scale) = 0;
  // adamw_step over every tensor of `layout` in the buffers, each tensor with p.weight_decay when
  // its `decay` is set and 0 otherwise. This loops over the tensors; CudaDevice does it in one
  // kernel.
  virtual void adamw_step_layout(float* params, float* m, float* v, const float* grads,
                                 const ParamLayout& layout, int64_t t, const AdamWParams& p,
                                 float grad_scale) {
    for (const ParamTensor& tensor : layout.tensors()) {
      AdamWParams hp = p;
      if (!tensor.decay) hp.weight_decay = 0.0f;
      adamw_step(params + tensor.offset, m + tensor.offset, v + tensor.offset,
                 grads + tensor.offset, tensor.numel, t, hp, grad_scale);
    }
  }
  virtual void ema_update(float* average, const float* x, size_t n, float decay) = 0;
  // Sum of squares of x (the result is on the host).
  virtual double sum_squares(const float* x, size_t n) = 0;

 protected:
  Precision precision_ = Precision::kFp32;
};

// The CPU device. `threads` as configure_blas_threads (0: OMP_NUM_THREADS, else all CPUs).
std::unique_ptr<Device> make_cpu_device(int threads = 0);

// True iff this build has CUDA and at least one CUDA device is visible.
bool cuda_device_available();
// Number of visible CUDA devices (0 without CUDA).
int cuda_device_count();

// A CUDA device on GPU `index` (0 <= index < cuda_device_count()). Throws cohort::train::CudaError
// when the build has no CUDA, no such GPU is visible or it cannot be used.
std::unique_ptr<Device> make_cuda_device(int index);

// Owns `count` elements of T on a device. Move-only.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& dev, size_t count)
      : dev_(&dev),
        ptr_(static_cast<T*>(count ? dev.alloc(count * sizeof(T)) : nullptr)),
        count_(count) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept : dev_(o.dev_), ptr_(o.ptr_), count_(o.count_) {
    o.ptr_ = nullptr;
    o.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      dev_ = o.dev_;
      ptr_ = o.ptr_;
      count_ = o.count_;
      o.ptr_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  void reset() {
    if (ptr_) dev_->release(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }

 private:
  Device* dev_ = nullptr;
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace cohort::train
