#include "cuda/common.cuh"
#include "cuda/workspace.cuh"

namespace cohort::train::cuda {

Workspace::~Workspace() {
  if (base_) {
    cudaStreamSynchronize(stream_);
    cudaFree(base_);
  }
}

void Workspace::carve(std::initializer_list<size_t> bytes, void** out) {
  size_t total = 0;
  for (size_t b : bytes) total += (b + 255) / 256 * 256;
  if (total > size_) {
    if (base_) {
      COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      COHORT_CUDA_CHECK(cudaFree(base_));
      base_ = nullptr;
      size_ = 0;
    }
    // Some room above the request, so that a slightly larger one does not reallocate again.
    const size_t want = total + total / 8;
    COHORT_CUDA_CHECK(cudaMalloc(&base_, want));
    size_ = want;
  }
  char* p = static_cast<char*>(base_);
  size_t i = 0;
  for (size_t b : bytes) {
    out[i++] = p;
    p += (b + 255) / 256 * 256;
  }
}

}  // namespace cohort::train::cuda
