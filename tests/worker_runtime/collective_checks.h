// Checks every collective of a process group against a serial reference: shared by the in-process
// (threads) tests and the multi-process worker (test_worker.cc).
//
// Inputs are small integers (in [-8, 8]) derived from (rank, index, case), so every reduction is
// exact in every dtype (bfloat16 included) whatever the order of operations; averages divide the
// exact sum exactly as the runtime specifies (in the element type; integers truncate).
#pragma once

#include <string>
#include <vector>

#include "cohort/process_group.h"

namespace cohort::test {

struct CheckOptions {
  std::vector<size_t> sizes{0, 1, 2, 7, 63, 64, 65, 1000, 4099};
  std::vector<DataType> types{DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16,
                              DataType::kInt32, DataType::kInt64};
  std::vector<ReduceOp> ops{ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax};
  bool subgroups = true;
};

// Runs the checks; every rank of `pg` must call it with the same options. Returns one line per
// mismatch (empty: everything matched). Collective failures propagate as exceptions.
std::vector<std::string> check_collectives(ProcessGroup& pg, const CheckOptions& options = {});

}  // namespace cohort::test
