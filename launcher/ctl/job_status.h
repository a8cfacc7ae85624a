// JobStatus: what `cohortctl status` knows about a job, read from the store it runs on: its
// rounds' node records, outcomes and failure reports (round_ops.h), the NodeStatus every node
// agent refreshes (node_status.h) and, for elastic jobs, the rendezvous' current round
// (keys::current_round(), rdzv/store_keys.h). Only reads: never waits for a key, never writes.
//
// A record that cannot be parsed (another version's, or half a job) is skipped and named in
// `problems`, so that one bad key does not hide the rest of the job. Any client of a tokenless
// store can write these keys: what is read is bounded (kMaxJobBytes a job; the store client
// bounds each value), and the rest skipped and named in `problems` too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cohort/rdzv/store.h"
#include "failure/failure.h"
#include "observe/node_status.h"
#include "rdzv/round_types.h"

namespace cohort::launch {

// The most of a job's records read in one look (a real job's are kilobytes per node).
inline constexpr size_t kMaxJobBytes = 64 << 20;

// One round that ended badly (or is known to have ended): its outcome and failure reports.
struct RoundRecord {
  int round = 0;
  std::optional<Outcome> outcome;
  std::vector<WorkerFailure> failures;  // every node's reports, plus the outcome's first failure
  int64_t world_size = 0;               // from the round's node records (0: unknown)
};

struct JobStatus {
  std::string run_id;
  int round = -1;  // the latest round the store knows of (-1: none yet)
  // The latest round's node records, by node rank (may be fewer than nnodes while nodes join).
  std::vector<NodeInfo> nodes;
  std::vector<NodeStatus> node_status;  // every status/<n> record, by node rank
  int nnodes = 0;
  int64_t workers = 0;
  int restarts = 0;
  int max_restarts = -1;  // -1: unknown
  // "running", "rendezvous", "succeeded", "failed", "aborted", "restarting", ... (the nodes' own
  // word when they publish NodeStatus; else what the latest outcome says; else "unknown").
  std::string state = "unknown";
  double updated = 0;  // Unix time of the newest NodeStatus (0: none)
  std::vector<Straggler> stragglers;
  std::vector<RoundRecord> rounds;  // rounds with an outcome or failures, oldest first
  std::vector<std::string> problems;
};

// "cohort/<run_id>/<rest>" keys grouped by run id: run_id -> the <rest> of each of its keys.
std::map<std::string, std::vector<std::string>> group_jobs(const std::vector<std::string>& keys);

// Reads job `run_id`, whose keys (relative to "cohort/<run_id>/") are `job_keys`, from `store`
// (the store's root, not a prefix store).
JobStatus read_job(Store& store, const std::string& run_id,
                   const std::vector<std::string>& job_keys);

// "succeeded", "failed", "aborted", "rescale".
std::string outcome_word(Outcome::Kind kind);

}  // namespace cohort::launch
