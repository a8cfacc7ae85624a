// The process environment as a plain map, so that code which reads variables (the launcher's
// flags, the worker's Context) takes a map that tests build by hand instead of calling setenv.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cohort {

using EnvMap = std::map<std::string, std::string>;

// A copy of environ. Not thread-safe against concurrent setenv (nothing in cohort calls it).
EnvMap current_env();

// "KEY=VALUE" entries of `env`, in key order (for execve).
std::vector<std::string> env_entries(const EnvMap& env);

}  // namespace cohort
