// cohortd: the standalone rendezvous store. See cohort/rdzv/cohortd.h.
#include <cstdio>
#include <exception>

#include "cohort/rdzv/cohortd.h"

int main(int argc, char** argv) {
  cohort::rdzv::CohortdConfig config;
  int rc = cohort::rdzv::parse_cohortd_args(argc, argv, &config);
  if (rc >= 0) return rc;
  try {
    return cohort::rdzv::run_cohortd(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortd: %s\n", e.what());
    return 1;
  }
}
