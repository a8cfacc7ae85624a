// What the failure summary adds when a failure looks like a setup mistake rather than a bug in
// the script: the interpreter that ran a Python worker that could not import something, and the
// launcher flag for a script that refuses the local-rank argument it got (or wants one it did
// not get). Pure: text in, lines out.
#pragma once

#include <string>
#include <vector>

#include "failure/failure.h"

namespace cohort::launch {

struct HintContext {
  // The Python that ran the workers, in words ("python3 (/usr/bin/python3, the first on PATH):
  // Python 3.11.2, torch 1.13.0a0 from ..."); "" when the workers are not Python.
  std::string interpreter;
};

// Lines (each starting "cohortrun: " and ending in '\n') for the summary of `failures`.
std::vector<std::string> failure_hints(const std::vector<WorkerFailure>& failures,
                                       const HintContext& context);

}  // namespace cohort::launch
