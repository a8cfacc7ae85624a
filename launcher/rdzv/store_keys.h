// Every key cohortrun's agents write in a job's store, each builder with its parser beside it (as
// LevelDB's db/filename.h keeps file names): the agents (rdzv/round_ops.h, rdzv/dynamic_protocol.h,
// rdzv/liveness_monitor.h, observe/node_observer.h) build them, `cohortctl status`
// (ctl/job_status.h) parses them, and renaming one is a change to this file only.
//
// Every key of a job lives under its run's prefix, "cohort/<run_id>/" (run_prefix), so co-located
// jobs never mix; the builders below give keys relative to it. The workers' own keys (PyTorch's
// process groups, libcohort's) are never in this keyspace.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cohort::launch::keys {

// "cohort/<run_id>": the prefix of every key of the run (without the trailing slash).
std::string run_prefix(const std::string& run_id);
// The run id of a full key "cohort/<run_id>/<rest>", and its relative part in `rest`; nullopt for
// a key outside every run.
std::optional<std::string> split_run(std::string_view full_key, std::string* rest = nullptr);

// ---- a round's bookkeeping (rdzv/round_ops.h)
// ----------------------------------------------------
std::string node(int round, int node_rank);      // "round/<r>/node/<n>": the node's NodeInfo
std::string done_count(int round);               // "round/<r>/done": nodes whose workers succeeded
std::string outcome(int round);                  // "round/<r>/outcome": decided once
std::string failures(int round, int node_rank);  // "round/<r>/failures/<n>": the node's failures
std::string exit_count(int round);               // "round/<r>/exit": nodes past the exit barrier
std::string exit_all(int round);                 // "round/<r>/exit/all": set by the last of them
// "round/<r>/running/<n>": when node n's workers of round r started (Unix seconds, as text); with
// the previous round's failure time, how long the job took to heal (ctl/job_status.h).
std::string running(int round, int node_rank);

// ---- the workers' stores (rdzv/round_stores.h)
// ---------------------------------------------------
// "worker_port/<port>": a counter, 1 once a round's workers' store or a node's relay for a round
// (rdzv/round_relays.h) of this job has listened on `port`; no later round's store or relay takes
// that port (round_ops::claim_worker_port).
std::string worker_port(int port);

// ---- hang probes (observe/hang_watch.h)
// ---------------------------------------------------------
std::string hang_probe(int round);  // "round/<r>/hang": the last probe's id (a counter)
// "round/<r>/hang/<p>/<n>": node n's workers' answers to probe p
std::string hang_answers(int round, int probe, int node_rank);

// ---- what each node agent says of itself while the job runs (observe/node_status.h)
// --------------
std::string status(int node_rank);  // "status/<n>"

// ---- the elastic rendezvous (rdzv/dynamic_protocol.h)
// --------------------------------------------
std::string current_round();                        // "rdzv/current"
std::string round_state(int round);                 // "rdzv/round/<r>/state"
std::string round_changed(int round, int version);  // "rdzv/round/<r>/changed/<v>"

// ---- liveness between the nodes of a round (rdzv/liveness_monitor.h)
// -----------------------------
std::string keep_alive(const std::string& node_id);  // "rdzv/hb/<id>": bumped while alive
std::string alive(const std::string& node_id);       // "rdzv/alive/<id>": a leased key (etcd)

// ---- outside every run: nodes still waiting for their rendezvous (rdzv/lobby.h)
// ------------------
std::string lobby();  // "cohort/lobby", a full key (split_run finds no run in it)

// A key relative to the run prefix, taken apart.
struct ParsedKey {
  enum class Kind {
    kOther,  // none of the above
    kNode,
    kDoneCount,
    kOutcome,
    kFailures,
    kExitCount,
    kExitAll,
    kRunning,
    kWorkerPort,
    kHangProbe,
    kHangAnswers,
    kStatus,
    kCurrentRound,
    kRoundState,
    kRoundChanged,
    kKeepAlive,
    kAlive,
  };
  Kind kind = Kind::kOther;
  int round = -1;       // kNode, kDoneCount, kOutcome, kFailures, kExit*, kRunning, kHang*, kRound*
  int node_rank = -1;   // kNode, kFailures, kRunning, kHangAnswers, kStatus
  int probe = -1;       // kHangAnswers
  int version = -1;     // kRoundChanged
  int port = -1;        // kWorkerPort
  std::string node_id;  // kKeepAlive, kAlive
};

// What `relative_key` is: the inverse of every builder above (numbers in canonical decimal form
// only); kOther for anything else.
ParsedKey parse(std::string_view relative_key);

}  // namespace cohort::launch::keys
