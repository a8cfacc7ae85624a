// Device's own methods, and the CUDA entry points of device.h for builds without CUDA (the CUDA
// build defines them in cuda/cuda_device.cu).
#include "cohort/train/device.h"

#include "cohort/error.h"

namespace cohort::train {

void Device::set_precision(Precision p) {
  const std::string why = why_unsupported(p);
  if (!why.empty()) {
    throw UsageError("--precision " + std::string(precision_name(p)) + " on " + describe() + ": " +
                     why);
  }
  precision_ = p;
}

}  // namespace cohort::train

#ifndef COHORT_TRAIN_HAVE_CUDA
namespace cohort::train {

bool cuda_device_available() {
  return false;
}

int cuda_device_count() {
  return 0;
}

std::unique_ptr<Device> make_cuda_device(int) {
  throw CudaError(
      "this build of cohort has no CUDA support (rebuild with the CUDA toolkit and NCCL "
      "installed)");
}

}  // namespace cohort::train
#endif
