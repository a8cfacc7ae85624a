#include "cohort/launch/launcher.h"

#include <filesystem>

#include "agent/node_agent.h"
#include "plan/job_plan.h"

namespace cohort::launch {

Launcher::Launcher(LaunchConfig config, std::map<std::string, std::string> env)
    : config_(std::move(config)), env_(std::move(env)) {}

int Launcher::run() {
  apply_devices(&config_, &env_);
  JobPlan plan = make_plan(std::move(config_), env_);
  const LaunchConfig& c = plan.config;
  // A log directory of our own making holds nothing but empty folders unless workers' output
  // went to files or a worker failed (its error file): a job that succeeded without either
  // leaves no trace in $TMPDIR (torchrun leaves a torchelastic_* folder per run).
  const bool only_empty_folders = c.redirects.all == kNone && c.redirects.per_rank.empty() &&
                                  c.tee.all == kNone && c.tee.per_rank.empty() &&
                                  c.duplicate_stdout_filters.empty() &&
                                  c.duplicate_stderr_filters.empty();
  const std::string temp_base = only_empty_folders ? plan.temp_log_base : std::string();
  int code;
  {
    NodeAgent agent(std::move(plan), std::move(env_));
    code = agent.run();
  }
  if (code == 0 && !temp_base.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(temp_base, ignored);
  }
  return code;
}

}  // namespace cohort::launch
