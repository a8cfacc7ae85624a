#include "cohort/train/blas.h"

#include <cstdlib>
#include <thread>

extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_corename(void);
}

namespace cohort::train {

int configure_blas_threads(int threads) {
  if (threads <= 0) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    threads = env ? std::atoi(env) : 0;
    // No launcher said how many: use the machine, as OpenBLAS itself would.
    if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
    if (threads <= 0) threads = 1;
  }
  openblas_set_num_threads(threads);
  return threads;
}

const char* blas_core_name() {
  return openblas_get_corename();
}

}  // namespace cohort::train
