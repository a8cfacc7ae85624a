// What each worker runs: the argv built from the entry point, torchrun's way.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cohort/launch/launch_config.h"

namespace cohort::launch {

struct WorkerCommand {
  std::vector<std::string> argv;
  std::string title;        // the entry point's name, for the failure summary ("train.py FAILED")
  std::string interpreter;  // the Python that runs it ("" for a direct program)
  size_t args_at = 0;       // index in argv where the script's own arguments begin
};

// A `.py` script runs as `$PYTHON_EXEC -u script args` (PYTHON_EXEC defaults to the python3 beside
// cohortrun when cohortrun is installed in a virtual environment, else python3 on PATH); -m
// runs `python -u -m module args`; --no-python, or an entry point that is an executable file
// (a path, or a name found on PATH) and not a .py, runs directly.
WorkerCommand build_worker_command(const LaunchConfig& config,
                                   const std::map<std::string, std::string>& env);

}  // namespace cohort::launch
