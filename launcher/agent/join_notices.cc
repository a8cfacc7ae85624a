#include "agent/join_notices.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "cohort/base/printable.h"
#include "failure/failure.h"

namespace cohort::launch {

JoinNotices::JoinNotices(LoopClock& clock, const JobPlan& plan, std::shared_ptr<spdlog::logger> log)
    : clock_(clock),
      plan_(plan),
      log_(std::move(log)),
      progress_timer_(clock_.make_timer()),
      lobby_timer_(clock_.make_timer()) {}

void JoinNotices::start(JobRendezvous& rdzv) {
  rdzv_ = &rdzv;
  join_started_ = clock_.now();
  report_progress();
  if (plan_.config.rdzv_backend != RdzvBackend::kStatic) {
    join_wall_started_ = wall_clock_now();
    lobby_tick();
  }
}

void JoinNotices::stop() {
  progress_timer_->cancel();
  lobby_timer_->cancel();
  rdzv_ = nullptr;
}

void JoinNotices::lobby_tick() {
  lobby::Waiting self;
  self.run_id = plan_.run_id;
  self.node = plan_.host + ":" + std::to_string(::getpid());
  self.host = plan_.host;
  self.entry = plan_.command.title;
  self.nnodes =
      std::to_string(plan_.config.min_nodes) + ":" + std::to_string(plan_.config.max_nodes);
  self.since = join_wall_started_;
  self.at = wall_clock_now();
  rdzv_->announce_waiting(self, [this, self](std::exception_ptr err,
                                             std::vector<lobby::Waiting> others) {
    // The join ended meanwhile (stop() disarms the timer): nothing more to say about it.
    if (err || !lobby_timer_->armed()) return;
    // Nodes of two jobs starting together meet their own within a second or two: only a wait of
    // a few seconds on both sides is worth a word.
    constexpr double kWorthSaying = 2.0;
    for (const lobby::Waiting& o : others) {
      if (self.at - self.since < kWorthSaying || self.at - o.since < kWorthSaying) continue;
      if (!told_of_runs_.insert(o.run_id).second) continue;
      log_->warn(
          "{}",
          printable(
              fmt::format(
                  "nodes of another job wait at {} too: run id {} ({}, --nnodes {}, on {}, "
                  "for {:.0f} s), while this node waits in run id {} ({}). Nodes meet only "
                  "within one run id: if they are one job, start every node with the same "
                  "--rdzv-id (without it, the id comes from the endpoint and the script's name)",
                  plan_.config.rdzv_endpoint, o.run_id, o.entry, o.nnodes, o.host,
                  self.at - o.since, plan_.run_id, plan_.command.title),
              false));
    }
  });
  lobby_timer_->start(kLobbyInterval, [this] { lobby_tick(); });
}

void JoinNotices::report_progress() {
  progress_timer_->start(kProgressInterval, [this] {
    const LaunchConfig& c = plan_.config;
    const bool elastic = c.rdzv_backend != RdzvBackend::kStatic;
    const auto waited =
        std::chrono::duration_cast<std::chrono::seconds>(clock_.now() - join_started_);
    const auto limit = std::chrono::duration_cast<std::chrono::seconds>(
        elastic ? plan_.rdzv_conf.join_timeout : c.rdzv_timeout);
    const std::string store =
        elastic ? c.rdzv_endpoint
                : (c.node_rank == 0 ? "this node" : format_host_port(c.master_addr, c.master_port));
    log_->warn(
        "still waiting for the rendezvous after {} s ({} s left): {} node(s) expected, the "
        "store at {}",
        waited.count(), std::max<long>(0, (limit - waited).count()),
        elastic ? std::to_string(c.min_nodes) + " to " + std::to_string(c.max_nodes)
                : std::to_string(c.max_nodes),
        store);
    report_progress();
  });
}

}  // namespace cohort::launch
