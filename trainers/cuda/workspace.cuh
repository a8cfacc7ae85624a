// Scratch device memory of a CudaDevice's launchers: the rounded copies of GEMM operands and the
// permuted heads of attention. One allocation that grows to the largest request; every launcher
// uses it only between its first and last launch, and all of them run on the one stream, so one
// call's pieces are never in use while another call's are written.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>

namespace cohort::train::cuda {

class Workspace {
 public:
  explicit Workspace(cudaStream_t stream) : stream_(stream) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Pointers to consecutive pieces of the given sizes in bytes, each 256-byte aligned, written to
  // out[0..]. Valid until the next call. Growing waits for the stream (the old buffer may still be
  // read by queued work) and reallocates; throws CudaError when that fails.
  void carve(std::initializer_list<size_t> bytes, void** out);

 private:
  cudaStream_t stream_;
  void* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cohort::train::cuda
