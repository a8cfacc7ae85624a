// cohortrun --slurm: what a user would otherwise type, derived from the SLURM_* variables of the
// allocation (see cohort/base/slurm.h). Flags given explicitly are left alone.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cohort/launch/launch_config.h"

namespace cohort::launch {

// Fills nnodes, node rank, master address and port, run id, workers per node and the forwarded
// signals from Slurm. Throws UsageError saying what is missing or malformed. `notes` receives
// what was derived (for the log) and warnings.
void apply_slurm(LaunchConfig* config, const std::map<std::string, std::string>& env,
                 std::vector<std::string>* notes);

}  // namespace cohort::launch
