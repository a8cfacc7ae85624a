#include "failure/failure_hints.h"

#include <algorithm>

namespace cohort::launch {
namespace {

bool any_says(const std::vector<WorkerFailure>& failures, const std::string& words) {
  return std::any_of(failures.begin(), failures.end(), [&](const WorkerFailure& f) {
    return f.traceback.find(words) != std::string::npos ||
           f.message.find(words) != std::string::npos;
  });
}

}  // namespace

std::vector<std::string> failure_hints(const std::vector<WorkerFailure>& failures,
                                       const HintContext& c) {
  std::vector<std::string> lines;
  if (!c.interpreter.empty()) {
    // ModuleNotFoundError is an ImportError; "cannot import name" and a missing symbol in an
    // extension module are ImportErrors too, and as often the wrong environment's.
    const bool import_failed = any_says(failures, "ImportError") ||
                               any_says(failures, "ModuleNotFoundError") ||
                               any_says(failures, "No module named");
    lines.push_back("cohortrun: the workers ran under " + c.interpreter +
                    (import_failed ? "; set PYTHON_EXEC to the Python that has the module (or "
                                     "start cohortrun as `python -m cohort.run` from that "
                                     "environment)"
                                   : "") +
                    "\n");
  }
  // argparse's words, after the flag the script did not expect or did not get.
  const bool refuses_dash = any_says(failures, "unrecognized arguments: --local-rank");
  const bool refuses_underscore = any_says(failures, "unrecognized arguments: --local_rank");
  const bool wants_underscore = any_says(failures, "required: --local_rank");
  const bool wants_dash = any_says(failures, "required: --local-rank");
  if (refuses_dash || wants_underscore) {
    lines.push_back(
        "cohortrun: the script wants torch.distributed.launch's --local_rank=N (PyTorch 1.x), " +
        std::string(refuses_dash ? "not the --local-rank=N that --append-local-rank gives"
                                 : "which torchrun and cohortrun do not give by default") +
        ": run it with --legacy-local-rank (or have it read the LOCAL_RANK variable)\n");
  } else if (refuses_underscore || wants_dash) {
    lines.push_back(
        "cohortrun: the script wants --local-rank=N (torchrun 2.x's form), " +
        std::string(refuses_underscore ? "not the --local_rank=N that --legacy-local-rank gives"
                                       : "which cohortrun gives only when asked") +
        ": run it with --append-local-rank (or have it read the LOCAL_RANK variable)\n");
  }
  return lines;
}

}  // namespace cohort::launch
