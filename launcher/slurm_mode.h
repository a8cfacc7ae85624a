// cohortrun --slurm: what a user would otherwise type, derived from the SLURM_* variables of the
// allocation (see cohort/rdzv/slurm.h). Flags given explicitly are left alone.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cohort/launch/launch_config.h"

namespace cohort::launch {

// Fills nnodes, node rank, master address and port, run id, workers per node and the forwarded
// signals from Slurm. Returns "" on success, else the message for the user. `notes` receives
// what was derived (for the log) and warnings.
std::string apply_slurm(LaunchConfig* config, const std::map<std::string, std::string>& env,
                        std::vector<std::string>* notes);

}  // namespace cohort::launch
