#include "workers/fork_servers.h"

#include <spdlog/spdlog.h>

#include <asio/post.hpp>
#include <chrono>

#include "cohort/error.h"

namespace cohort::launch {

ForkServers::ForkServers(asio::io_context& io, ProcessSpawner& spawner, ForkServersOptions options,
                         std::shared_ptr<spdlog::logger> log, std::function<void(pid_t)> started,
                         std::function<void(pid_t)> gone)
    : io_(io),
      spawner_(spawner),
      options_(std::move(options)),
      log_(std::move(log)),
      started_(std::move(started)),
      gone_(std::move(gone)) {}

ForkServers::~ForkServers() {
  alive_.reset();
  for (auto& [lr, slot] : slots_) drop(slot);
}

void ForkServers::drop(Slot& slot) {
  if (!slot.server) return;
  const pid_t pid = slot.server->pid();
  slot.server.reset();  // kills and reaps it
  if (gone_ && !slot.forgotten && pid > 0) gone_(pid);
  slot.forgotten = false;
}

void ForkServers::start(const GroupSpec& group) {
  for (const WorkerSpec& w : group.workers) {
    Slot& slot = slots_[w.local_rank];
    // A server that refused to start (CUDA initialised in it, a thread) stays as the record of
    // that: another would refuse again.
    if (slot.server && slot.server->state() != ForkServer::State::kGone) continue;
    drop(slot);
    if (slot.starts >= options_.max_starts) continue;
    start_one(w.local_rank, w.request);
  }
}

void ForkServers::start_one(int lr, const SpawnRequest& worker) {
  Slot& slot = slots_[lr];
  ++slot.starts;
  slot.told = false;
  ForkServerSpec spec;
  spec.local_rank = lr;
  spec.server_file = options_.server_file;
  spec.worker = worker;
  if (!options_.log_dir.empty())
    spec.log_file = options_.log_dir + "/fork_server_" + std::to_string(lr) + ".log";
  try {
    slot.server = std::make_unique<ForkServer>(io_, spawner_, std::move(spec),
                                               [this, lr, alive = std::weak_ptr<int>(alive_)] {
                                                 if (!alive.expired()) on_changed(lr);
                                               });
    if (started_) started_(slot.server->pid());
    log_->info("fork server of local rank {} started (pid {}): it imports torch for the restarts",
               lr, slot.server->pid());
  } catch (const std::exception& e) {
    log_->warn("cannot start the fork server of local rank {}: {}; its restarts exec", lr,
               e.what());
    slot.starts = options_.max_starts;
  }
}

void ForkServers::on_changed(int lr) {
  Slot& slot = slots_[lr];
  if (!slot.server) return;
  if (slot.server->exited() && !slot.forgotten) {
    slot.forgotten = true;
    if (gone_) gone_(slot.server->pid());
  }
  switch (slot.server->state()) {
    case ForkServer::State::kReady:
      log_->info("fork server of local rank {} ready in {:.1f} s (pid {})", lr,
                 slot.server->start_seconds(), slot.server->pid());
      break;
    case ForkServer::State::kRefused:
    case ForkServer::State::kGone:
      if (!slot.told) {
        slot.told = true;
        log_->warn("fork server of local rank {} cannot serve: {}; its restarts exec", lr,
                   slot.server->reason());
      }
      break;
    case ForkServer::State::kStarting:
      break;
  }
  if (settled_ && !any_starting()) {
    auto settled = std::move(settled_);
    settled_ = nullptr;
    settled();
  }
}

void ForkServers::abandon_starting(std::chrono::milliseconds waited) {
  for (auto& [lr, slot] : slots_) {
    if (!slot.server || slot.server->state() != ForkServer::State::kStarting) continue;
    log_->warn("fork server of local rank {} did not finish importing in {} s: its restarts exec",
               lr, waited.count() / 1000);
    slot.told = true;
    drop(slot);
    slot.starts = options_.max_starts;
  }
  if (settled_) {
    auto settled = std::move(settled_);
    settled_ = nullptr;
    settled();
  }
}

bool ForkServers::any_starting() const {
  for (const auto& [lr, slot] : slots_)
    if (slot.server && slot.server->state() == ForkServer::State::kStarting) return true;
  return false;
}

void ForkServers::when_settled(std::function<void()> settled) {
  settled_ = std::move(settled);
  if (!any_starting()) {
    asio::post(io_, [this, alive = std::weak_ptr<int>(alive_)] {
      if (alive.expired() || !settled_ || any_starting()) return;
      auto settled = std::move(settled_);
      settled_ = nullptr;
      settled();
    });
  }
}

bool ForkServers::begin(int lr, const SpawnRequest& request) {
  auto it = slots_.find(lr);
  if (it == slots_.end() || !it->second.server) return false;
  Slot& slot = it->second;
  switch (slot.server->state()) {
    case ForkServer::State::kReady:
      break;
    case ForkServer::State::kStarting:
      log_->warn("fork server of local rank {} is still importing: this worker execs", lr);
      return false;
    default:
      return false;  // said why when it happened
  }
  std::string why;
  slot.begun = std::chrono::steady_clock::now();
  if (slot.server->send(request, &why)) {
    slot.request = request;
    return true;
  }
  after_failure(lr, slot, why, request);
  return false;
}

std::optional<SpawnedProcess> ForkServers::finish(int lr) {
  auto it = slots_.find(lr);
  if (it == slots_.end() || !it->second.server || !it->second.server->pending())
    return std::nullopt;
  Slot& slot = it->second;
  std::string why;
  auto p = slot.server->collect(&why);
  if (p) {
    log_->info("local rank {}: worker forked by its fork server in {} ms (pid {})", lr,
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - slot.begun)
                   .count(),
               p->pid);
    return p;
  }
  after_failure(lr, slot, why, slot.request);
  return std::nullopt;
}

void ForkServers::after_failure(int lr, Slot& slot, const std::string& why,
                                const SpawnRequest& request) {
  log_->warn("fork server of local rank {} did not start this worker: {}; it execs", lr, why);
  if (slot.server->state() == ForkServer::State::kReady) return;  // this request only
  // Stale (a pre-imported module changed on disk) or broken: a new one serves the next rounds.
  slot.told = true;
  drop(slot);
  if (slot.starts < options_.max_starts) start_one(lr, request);
}

std::vector<pid_t> ForkServers::pids() const {
  std::vector<pid_t> out;
  for (const auto& [lr, slot] : slots_)
    if (slot.server && !slot.server->exited()) out.push_back(slot.server->pid());
  return out;
}

}  // namespace cohort::launch
