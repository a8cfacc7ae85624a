// The exception the trainers' CUDA code throws (COHORT_CUDA_CHECK, cuBLAS checks): the message
// names the failed call, the error string and file:line.
#pragma once

#include "cohort/rdzv/error.h"

namespace cohort::train {

class CudaError : public cohort::Error {
 public:
  using cohort::Error::Error;
};

}  // namespace cohort::train
