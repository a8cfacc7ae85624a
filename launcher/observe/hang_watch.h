// HangWatch: the job-wide look at a suspected hang, from any node.
//
// When one of this node's workers falls silent (WorkerGroup's silent event: no beat for the
// watch's timeout, or none since its hello), the watch starts a probe through the store
// (rdzv/round_ops.h): the round's probe counter goes up, and every node's watch, which looks at
// the counter whenever its agent ticks (poll(), every second), asks its own workers
// (WorkerGroup::probe, the control sockets of cohort/base/hang_probe.h) and publishes their answers
// with what the agent knows of them (beat silence, GPU notes). The node that started the probe
// gathers every node's answers (up to a deadline), judges them (failure/hang_analysis.h) and keeps
// the report, which the status record carries to `cohortctl status`.
//
// The verdict decides what happens next:
//   - hung, for at least `stop_after`: the `hung` event with the culprit's failure (its host, its
//     stack to the line, its GPU's condition, the waiting ranks in one line each); a culprit of
//     this node that did not answer, or whose answer has no stack (libcohort), is asked for its
//     stack the old way (`hung_without_stack`: SIGABRT; Python's faulthandler needs no GIL);
//   - hung, but only `report_after` (stop_after 0 or not reached): the report and one log line;
//   - a collective waited on for less than the timeout: a new probe when it would reach it;
//   - quiet (no rank inside a collective: an evaluation, a checkpoint), or progressing: another
//     look after the timeout, as long as a worker stays silent.
// One probe at a time per node; a silence during a probe waits for it. Nodes whose workers fall
// silent together start a probe each: every node answers every probe asked of it (one question
// to its workers for all of them), and only the last probe started is judged.
//
// Thread safety: the loop's thread only.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "failure/failure.h"
#include "failure/hang_analysis.h"
#include "loop/loop_clock.h"
#include "observe/hang_status.h"
#include "rdzv/round_types.h"

namespace spdlog {
class logger;
}

namespace cohort::launch {

class JobRendezvous;
class WorkerGroup;

struct HangWatchOptions {
  // A judged hang at least this old stops the job (--worker-hang-timeout; 0: never).
  std::chrono::milliseconds stop_after{0};
  // A judged hang at least this old is reported (log, status record); the watch's timeout is the
  // smaller of the two that are set.
  std::chrono::milliseconds report_after{0};
  std::chrono::milliseconds answer_deadline{2000};  // a worker's answer to its node
  std::chrono::milliseconds nodes_deadline{4000};   // every node's answers to the one that asked

  // The timeout of a worker's silence before a probe (0: the watch is off).
  std::chrono::milliseconds timeout() const;
};

class HangWatch {
 public:
  struct Events {
    // The job is hung: `root_cause` is the culprit's failure (possibly of another node).
    std::function<void(WorkerFailure root_cause)> hung;
    // The culprit is this node's worker `local_rank` and did not answer: ask it for its stack,
    // then report it hung with `reason` and `waiting` (one line per waiting rank).
    std::function<void(int local_rank, std::string reason, std::vector<std::string> waiting)>
        hung_without_stack;
    // What NVML says about local rank `lr`'s GPU ("" when nothing).
    std::function<std::string(int lr)> gpu_note;
  };

  // `clock` and `log` must outlive the watch. Nothing happens before start_round().
  HangWatch(LoopClock& clock, HangWatchOptions options, std::shared_ptr<spdlog::logger> log,
            Events events);
  ~HangWatch();
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  bool enabled() const { return options_.timeout().count() > 0; }
  // A round's workers run: `group` (this node's) and `rdzv` must outlive the round (stop()).
  void start_round(const RankAssignment& a, std::string host, WorkerGroup* group,
                   JobRendezvous* rdzv);
  // The round is over: no more probes, answers or events.
  void stop();
  // One of this node's workers fell silent.
  void suspect();
  // Looks for a probe another node started, and answers it (a job of several nodes; call it
  // about every second).
  void poll();
  // The last report this node made (nullopt before any).
  const std::optional<HangStatus>& last_status() const { return status_; }

 private:
  void start_probe();

  // Asks this node's workers (once for any number of probe ids asked meanwhile) and publishes
  // their answers under probe `id` and every earlier one asked of this node and not yet answered.
  void answer(int64_t id);
  void ask_workers();
  void collect(int64_t id, Clock::time_point deadline);
  // Judges probe `id` unless a later probe was started since: that one's node judges.
  void supersede_or_judge(int64_t id, std::vector<std::optional<std::string>> records);
  void judge(int64_t id, const std::vector<std::optional<std::string>>& records);
  void act(const HangReport& report, const std::vector<RankProbe>& ranks);
  void probe_again_in(std::chrono::milliseconds d);

  LoopClock& clock_;
  HangWatchOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  Events events_;
  std::unique_ptr<LoopTimer> collect_timer_;
  std::unique_ptr<LoopTimer> again_timer_;
  // The round (set between start_round and stop).
  RankAssignment assignment_;
  std::string host_;
  WorkerGroup* group_ = nullptr;
  JobRendezvous* rdzv_ = nullptr;
  bool polling_ = false;          // a look at the probe counter is under way
  int64_t wanted_ = 0;            // the highest probe id asked of this node
  int64_t published_ = 0;         // the highest probe id this node published answers for
  int64_t own_probe_ = 0;         // the last probe this node started
  Clock::time_point asked_at_{};  // when wanted_ was asked
  bool asking_ = false;           // its workers are being asked
  // Answers are published under at most this many probe ids at once (ids older than that have
  // been judged without this node, or given up).
  static constexpr int64_t kMaxUnanswered = 16;
  bool probing_ = false;        // this node's probe is in flight
  bool suspect_again_ = false;  // a silence came during it
  bool acted_ = false;          // the hung event went out: nothing more this round
  std::string last_logged_;     // the last summary logged (said once)
  std::optional<HangStatus> status_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // callbacks check it
};

// The record a node publishes for a probe, and its parts (JSON; hang_watch.cc).
std::string encode_node_answers(int node_rank, const std::string& host,
                                const std::vector<RankProbe>& workers,
                                const std::vector<std::optional<std::string>>& answers);
// Every rank of the job for the analysis: those of the records that came, and a rank without
// answer ("its node did not answer in time") for each rank of a node whose record is missing.
// Throws ProtocolError naming what is malformed in a record.
std::vector<RankProbe> ranks_from_answers(const RankAssignment& a,
                                          const std::vector<std::optional<std::string>>& records);

}  // namespace cohort::launch
