// An out-of-tree program that uses an installed libcohort (tests/install/install_test.sh builds it
// with find_package(cohort) and with pkg-config): under cohortrun, every rank allreduces its
// rank + 1 and checks the sum against world_size * (world_size + 1) / 2.
#include <cstdio>
#include <exception>
#include <vector>

#include "cohort/context.h"
#include "cohort/cpu_process_group.h"

int main() {
  try {
    cohort::Context ctx = cohort::Context::from_env();
    auto pg = cohort::new_cpu_process_group(ctx);
    std::vector<float> v(1024, static_cast<float>(ctx.rank() + 1));
    pg->allreduce(std::span<float>(v), cohort::ReduceOp::kSum);
    const int n = ctx.world_size();
    const float want = static_cast<float>(n * (n + 1) / 2);
    for (float x : v) {
      if (x != want) {
        std::fprintf(stderr, "rank %d: allreduce gave %g, want %g\n", ctx.rank(), x, want);
        return 1;
      }
    }
    std::printf("consumer rank %d of %d: allreduce sum %g ok\n", ctx.rank(), n, want);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
