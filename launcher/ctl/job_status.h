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

// One round the store has records of: its outcome and failure reports once it ended, and when it
// ran.
struct RoundRecord {
  int round = 0;
  std::optional<Outcome> outcome;
  std::vector<WorkerFailure> failures;  // every node's reports, plus the outcome's first failure
  int64_t world_size = 0;               // from the round's node records (0: unknown)
  // Wall clock (seconds since the epoch) when every node of the round had started its workers
  // (the latest of its round/<r>/running/<n> records); 0 while a node has not, or unknown.
  double running_at = 0;
  // When the round ended: its first failure's time for a failed round, else when its outcome was
  // decided; 0 while it runs, or unknown.
  double ended_at = 0;
  // How long the job took to heal into this round: from the end of the round before it to this
  // round's workers running on every node; -1 for the first round, or when a time is unknown.
  double healed_in = -1;
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
  // The newest hang report any node made this round (observe/hang_status.h), if any.
  std::optional<HangStatus> hang;
  std::vector<RoundRecord> rounds;  // rounds with an outcome, failures or running records,
                                    // oldest first
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
