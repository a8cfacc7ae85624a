// CPU thread settings of the trainers.
#pragma once

namespace cohort::train {

// Sets OpenBLAS's thread count: `threads` when positive, else OMP_NUM_THREADS (which cohortrun and
// torchrun set to cores / local workers), else the number of CPUs. Returns the count in effect.
int configure_blas_threads(int threads = 0);

// OpenBLAS's name for the kernel family it picked at run time ("Cooperlake", "Haswell", ...).
const char* blas_core_name();

}  // namespace cohort::train
