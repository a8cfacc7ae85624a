// cohortrun: a torchrun-compatible launcher. See cohort/launch/launcher.h.
#include <cstdio>
#include <exception>

#include "cohort/base/environment.h"
#include "cohort/launch/cli.h"
#include "cohort/launch/launcher.h"

int main(int argc, char** argv) {
  cohort::EnvMap env = cohort::current_env();
  cohort::launch::LaunchConfig config;
  auto cli = cohort::launch::parse_cli(argc, argv, env, &config);
  if (cli.exit_code >= 0) {
    std::fprintf(cli.exit_code == 0 ? stdout : stderr, "%s\n", cli.message.c_str());
    return cli.exit_code;
  }
  try {
    return cohort::launch::Launcher(std::move(config), std::move(env)).run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 1;
  }
}
