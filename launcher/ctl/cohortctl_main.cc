// cohortctl: looks at the jobs on a rendezvous store (`cohortctl status`). See ctl_command.h.
#include "ctl/ctl_command.h"

int main(int argc, char** argv) {
  cohort::launch::CtlConfig config;
  int rc = cohort::launch::parse_ctl_args(argc, argv, &config);
  if (rc >= 0) return rc;
  return cohort::launch::run_status(config);
}
