// The failure summary, in torchrun's layout (docs/TORCHRUN.md §3.5):
//
//   ============================================================
//   train.py FAILED
//   ------------------------------------------------------------
//   Failures:
//     <NO_OTHER_FAILURES>
//   ------------------------------------------------------------
//   Root Cause (first observed failure):
//   [1]:
//     time      : 2026-11-30_03:13:26
//     host      : node1
//     rank      : 1 (local_rank: 1)
//     exitcode  : -11 (pid: 20113)
//     reason    : killed by SIGSEGV
//     error_file: <N/A>
//     gpu       : GPU 0 (GPU-5fd3...): Xid 79 (GPU has fallen off the bus)   (when NVML said so)
//     waiting   : rank 0 (node0, pid 20112): waits in all_reduce ..., for 12.0 s   (a hang's
//     culprit:
//                 rank 2 (node1, pid 20410): waits in all_reduce ...              one line per
//                 rank)
//     traceback : <the worker's error file, or the last lines of its stderr>
//   ============================================================
//
// The root cause is the earliest failure across the job; the others follow in rank order. Each
// block is labelled with its global rank. When the root cause is a timeout (a rendezvous, a
// barrier, a collective), the ranks of the world that had not failed are named after it: the
// rank that was late, or hung, is among them, and the rank that timed out only waited for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "failure/failure.h"

namespace cohort::launch {

// REQUIRES: !failures.empty(). `world_size` 0: unknown (no ranks are named).
std::string format_failure_report(const std::string& title, std::vector<WorkerFailure> failures,
                                  int world_size = 0);

// The root cause of a set of failures: the index of the earliest. REQUIRES: !failures.empty().
size_t root_cause(const std::vector<WorkerFailure>& failures);
// When the root cause timed out waiting: the ranks of the world (0..world_size-1) that had not
// failed, among which is the one that was late or hung; empty otherwise.
std::vector<int> timeout_suspects(const std::vector<WorkerFailure>& failures, int64_t world_size);
// "1, 3, 5-9": ranks as a short list.
std::string rank_list(const std::vector<int>& ranks);

// Whether a failure's words say it timed out waiting ("timed out", "timeout", "deadline").
bool is_timeout(const WorkerFailure& f);

}  // namespace cohort::launch
