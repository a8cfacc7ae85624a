// cohortrun's command line: every flag of torchrun (2.x, which includes 1.13's) in both spellings
// (--nproc-per-node and --nproc_per_node), with torchrun's defaults, PET_<FLAG> environment
// variables as defaults, and argparse's rules (unambiguous abbreviations such as --nproc 2,
// --flag=value, -r3); torch.distributed.launch's --use-env; cohortrun's own flags; then the entry
// point and its arguments, which all belong to the workers.
//
// The flags live in one table (cli.cc) from which the parser, --help and the shell completion
// are all made.
#pragma once

#include <map>
#include <string>

#include "cohort/launch/launch_config.h"

namespace cohort::launch {

enum class CliAction {
  kLaunch,  // go on and launch
  kPrint,   // print `text` to stdout and exit 0 (--help, --version, --print-completion)
};

struct CliResult {
  CliAction action = CliAction::kLaunch;
  std::string text;
};

// Parses argv into *config. `env` supplies PET_* defaults (and TORCH_ELASTIC_SHUTDOWN_TIMEOUT).
// Throws UsageError naming the flag and what it takes.
CliResult parse_cli(int argc, char** argv, const std::map<std::string, std::string>& env,
                    LaunchConfig* config);

// Parses "N" or "lr:N,lr:N"; throws UsageError naming `flag` and the bad part.
StreamSpec parse_stream_spec(const std::string& text, const std::string& flag);

// Checks combinations the parser cannot; throws UsageError saying what to do instead.
// Combinations torchrun ignores (--standalone with --rdzv-*) are noted in config->notes and
// resolved, not refused.
void validate(LaunchConfig* config);

// The text of --help, and a bash completion script (cohortrun --print-completion bash).
std::string help_text();
std::string bash_completion();

}  // namespace cohort::launch
