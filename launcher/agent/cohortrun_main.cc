// cohortrun: a torchrun-compatible launcher. See cohort/launch/launcher.h and cli.h.
#include <cstdio>
#include <exception>

#include "cohort/base/environment.h"
#include "cohort/error.h"
#include "cohort/launch/cli.h"
#include "cohort/launch/launcher.h"

// Exit status: the job's (0, 1, 128+N), or 2 for a usage error, 1 when the node cannot start.
int main(int argc, char** argv) {
  cohort::EnvMap env = cohort::current_env();
  try {
    cohort::launch::LaunchConfig config;
    auto cli = cohort::launch::parse_cli(argc, argv, env, &config);
    if (cli.action == cohort::launch::CliAction::kPrint) {
      std::fputs(cli.text.c_str(), stdout);
      if (!cli.text.empty() && cli.text.back() != '\n') std::fputc('\n', stdout);
      return 0;
    }
    return cohort::launch::Launcher(std::move(config), std::move(env)).run();
  } catch (const cohort::UsageError& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 1;
  }
}
