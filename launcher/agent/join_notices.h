// JoinNotices: what a node says while its rendezvous is pending. Every 10 s, that it still waits,
// for how much longer and for whom; and, in an elastic job, every kLobbyInterval it says in the
// store's lobby that it waits in this run and learns of nodes waiting in other runs at the same
// store (rdzv/lobby.h), each such run named once a job: two jobs meant to be one that were given
// different run ids would otherwise wait out the whole join timeout in silence.
//
// Thread safety: the loop's thread only.
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include "loop/loop_clock.h"
#include "plan/job_plan.h"
#include "rdzv/job_rendezvous.h"

namespace spdlog {
class logger;
}

namespace cohort::launch {

class JoinNotices {
 public:
  static constexpr std::chrono::milliseconds kProgressInterval{std::chrono::seconds(10)};
  static constexpr std::chrono::milliseconds kLobbyInterval{2500};

  // `clock` and `plan` must outlive it.
  JoinNotices(LoopClock& clock, const JobPlan& plan, std::shared_ptr<spdlog::logger> log);

  // A join has started through `rdzv`, which must outlive it or the next stop().
  void start(JobRendezvous& rdzv);
  // The join has ended (or the node is shutting down): nothing more is said about it.
  void stop();

 private:
  void report_progress();
  void lobby_tick();

  LoopClock& clock_;
  const JobPlan& plan_;
  std::shared_ptr<spdlog::logger> log_;
  JobRendezvous* rdzv_ = nullptr;
  std::unique_ptr<LoopTimer> progress_timer_;
  std::unique_ptr<LoopTimer> lobby_timer_;
  Clock::time_point join_started_;
  double join_wall_started_ = 0;        // seconds since the epoch, as the lobby's records are
  std::set<std::string> told_of_runs_;  // the other runs named so far (once each, a job)
};

}  // namespace cohort::launch
