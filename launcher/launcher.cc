#include "cohort/launch/launcher.h"

#include "job_plan.h"
#include "node_agent.h"

namespace cohort::launch {

Launcher::Launcher(LaunchConfig config, std::map<std::string, std::string> env)
    : config_(std::move(config)), env_(std::move(env)) {}

int Launcher::run() {
  apply_devices(&config_, &env_);
  JobPlan plan = make_plan(std::move(config_), env_);
  NodeAgent agent(std::move(plan), std::move(env_));
  return agent.run();
}

}  // namespace cohort::launch
