// The per-round bookkeeping every node agent does in the store, whichever rendezvous formed the
// round: node records, the round's outcome (decided once, by compare_set: the first node to report
// a failure, or the last to report success, decides it), failure reports, the success count and
// the exit barrier. Every key lives under the run's prefix, "cohort/<run_id>/" (keys::run_prefix,
// rdzv/store_keys.h), so co-located jobs never mix. Every function blocks; StoreBridge runs them on
// its thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "cohort/rdzv/store.h"
#include "failure/failure.h"
#include "rdzv/round_types.h"
#include "rdzv/store_keys.h"

namespace cohort::launch {

namespace round_ops {

// Publishes `self` for `round` and waits (up to `timeout`) for the records of nodes 0..nnodes-1.
// Throws StoreTimeoutError naming the node ranks that did not report.
std::vector<NodeInfo> exchange_node_info(Store& store, int round, const NodeInfo& self, int nnodes,
                                         std::chrono::milliseconds timeout);

// The job's restart count after `round` ended: its outcome's count (0 before the first round).
int restarts_after(Store& store, int round);

// The outcome of `round`, if decided.
std::optional<Outcome> outcome_of(Store& store, int round);

// Stores this node's failures and tries to decide `round` as failed (restarts = restart_count+1).
void publish_failure(Store& store, int round, int node_rank, int restart_count,
                     const std::vector<WorkerFailure>& failures);
// Counts this node as done; the last of `nnodes` decides `round` as succeeded.
void publish_success(Store& store, int round, int node_rank, int nnodes);
// Tries to decide `round` as `kind` (aborted, rescale, failed) with `detail`; stamps
// outcome.decided_at with the wall clock when it is 0.
void publish_outcome(Store& store, int round, Outcome outcome);
// Records when this node's workers of `round` started (wall clock, seconds since the epoch).
void publish_running(Store& store, int round, int node_rank, double started_at);
// Records `port` as one a round's workers' store, or a node's relay for a round, of this job
// listens on (keys::worker_port); false when a store or relay of the job has claimed it before:
// that round's workers may still dial it (rdzv/round_stores.h, rdzv/round_relays.h). Of concurrent
// claims of one port, exactly one succeeds.
bool claim_worker_port(Store& store, int port);
// Sets this node's status record; node rank 0 gets back every node's record that exists.
std::vector<std::string> publish_status(Store& store, int node_rank, int nnodes,
                                        const std::string& record);
// Hang probes (observe/hang_watch.h). A node that wants every rank asked starts probe
// `start_hang_probe` (the round's counter, plus one); every node answers each probe id it has
// not answered yet (`latest_hang_probe` says which is the last) with its workers' answers
// (`publish_hang_answers`); the node that started it reads what has come (`hang_answers`: one
// entry per node, nullopt where nothing came yet).
int64_t start_hang_probe(Store& store, int round);
int64_t latest_hang_probe(Store& store, int round);
void publish_hang_answers(Store& store, int round, int64_t probe, int node_rank,
                          const std::string& record);
std::vector<std::optional<std::string>> hang_answers(Store& store, int round, int64_t probe,
                                                     int nnodes);
// Every failure record nodes published for `round`.
std::vector<WorkerFailure> collect_failures(Store& store, int round, int nnodes);
// Counts this node out; with `wait_for_all`, waits (up to `timeout`) for all `nnodes`.
void exit_barrier(Store& store, int round, int nnodes, bool wait_for_all,
                  std::chrono::milliseconds timeout);

}  // namespace round_ops
}  // namespace cohort::launch
