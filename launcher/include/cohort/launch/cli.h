// cohortrun's command line: every torchrun flag in both spellings (--nproc-per-node and
// --nproc_per_node), torchrun's defaults, PET_<FLAG> environment variables as defaults, then the
// entry point and its arguments. Flags of capabilities cohortrun does not have yet are accepted by
// the parser and refused by validate() with a message saying what to use instead.
#pragma once

#include <map>
#include <string>

#include "cohort/launch/launch_config.h"

namespace cohort::launch {

struct CliResult {
  int exit_code = -1;   // -1: go on and launch; otherwise exit with it (0 after --help)
  std::string message;  // printed by the caller (usage error or help text)
};

// Parses argv into *config. `env` supplies PET_* defaults.
CliResult parse_cli(int argc, char** argv, const std::map<std::string, std::string>& env,
                    LaunchConfig* config);

// Parses "N" or "lr:N,lr:N"; throws std::invalid_argument naming the bad part.
StreamSpec parse_stream_spec(const std::string& text, const std::string& flag);

// Checks combinations the parser cannot; returns "" when fine, else the message for the user.
std::string validate(const LaunchConfig& config);

}  // namespace cohort::launch
