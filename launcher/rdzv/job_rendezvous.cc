#include "rdzv/job_rendezvous.h"

#include "rdzv/round_ops.h"

#include "cohort/base/printable.h"

namespace cohort::launch {

JobRendezvous::JobRendezvous(asio::io_context& io, LoopClock& clock, std::string run_id,
                             StoreBridge::StoreFactory factory, std::shared_ptr<spdlog::logger> log)
    : io_(io),
      clock_(clock),
      run_id_(std::move(run_id)),
      log_(std::move(log)),
      bridge_(std::make_unique<StoreBridge>(io.get_executor(), std::move(factory),
                                            keys::run_prefix(run_id_))) {}

JobRendezvous::~JobRendezvous() = default;

JobRendezvous::Done JobRendezvous::unless_moved(Done done) {
  return [this, generation = store_generation_, done = std::move(done)](std::exception_ptr err) {
    if (err && generation != store_generation_) err = nullptr;
    done(err);
  };
}

void JobRendezvous::open_relay(
    const RankAssignment& a,
    std::function<void(std::optional<HostPort> relay, std::string why_not)> done) {
  auto result = std::make_shared<RoundRelays::Opened>();
  const HostPort store = worker_store(a);
  const int round = a.round;
  bridge_->run(
      [this, result, store, round](Store& s) {
        relays_.close_before(round);
        // A port that no earlier round of the job used, for a relay or a workers' store, on any
        // node: claimed job-wide as the round stores' ports are (rdzv/round_stores.h), so that a
        // worker of an old round that dials its old address again never reaches this round.
        *result = relays_.open(round, store,
                               [&s](int port) { return round_ops::claim_worker_port(s, port); });
      },
      [result, done = std::move(done)](std::exception_ptr err) {
        if (err) {
          try {
            std::rethrow_exception(err);
          } catch (const std::exception& e) {
            done(std::nullopt, e.what());
          }
          return;
        }
        done(result->relay, result->why_not);
      });
}

void JobRendezvous::move_store(StoreBridge::StoreFactory factory) {
  ++store_generation_;
  // Every callback of the old store's operations still runs, so that no step waits for one
  // forever (a status record or a hang poll queued behind a call the lost store never answers
  // would keep its sender "busy" for good): the queued ones are given up with an error, and the
  // old bridge's destructor interrupts the blocked ones. unless_moved() turns their errors into
  // success for the round's own operations, whose round the move ends anyway; the watch is
  // replaced below and its old callbacks never run.
  bridge_->drop_queued("not sent: the rendezvous store moved before this call ran");
  bridge_ = std::make_unique<StoreBridge>(io_.get_executor(), std::move(factory),
                                          keys::run_prefix(run_id_));
  if (watched_round_ >= 0) watch_outcome(watched_round_, on_outcome_, on_watch_error_);
}

void JobRendezvous::watch_outcome(int round, std::function<void(Outcome)> on_outcome,
                                  std::function<void(std::string)> on_error) {
  watched_round_ = round;
  on_outcome_ = on_outcome;
  on_watch_error_ = on_error;
  // Both callbacks get their own copy of on_error (a lambda that captured it while it was being
  // moved into the other argument got an empty one: bad_function_call on the first malformed
  // outcome).
  auto on_lost = [on_error](std::string what) { on_error("lost the store: " + what); };
  const std::string key = keys::run_prefix(run_id_) + "/" + keys::outcome(round);
  bridge_->watch(
      keys::outcome(round),
      [on_outcome, on_error, key, round](std::string text) {
        Outcome o;
        try {
          o = outcome_from_json(text);
        } catch (const std::exception& e) {
          // Someone else wrote it (any client of a tokenless store can): no agent can decide the
          // round any more, since the first outcome written is the one that stands.
          on_error(printable("the store holds a malformed outcome for round " +
                                 std::to_string(round) + " (" + key + " = '" + text.substr(0, 80) +
                                 (text.size() > 80 ? "...'" : "'") + ": " + e.what() +
                                 "), written by another client of the store; the job cannot go "
                                 "on",
                             false));
          return;
        }
        on_outcome(std::move(o));
      },
      std::move(on_lost));
}

void JobRendezvous::announce_waiting(
    lobby::Waiting self,
    std::function<void(std::exception_ptr, std::vector<lobby::Waiting>)> done) {
  auto others = std::make_shared<std::vector<lobby::Waiting>>();
  bridge_->run_status_unscoped(
      [self, others, run = run_id_](Store& s) {
        const std::string key = keys::lobby();
        s.append(key, lobby::encode(self));
        const std::string value = s.get(key);
        *others = lobby::other_runs(lobby::fresh(value, self.at), run);
        // Whoever finds it large cuts it to its fresh lines; an append meanwhile makes the cut
        // fail, and it waits for the next turn.
        if (auto cut = lobby::trimmed(value, self.at)) s.compare_set(key, value, *cut);
      },
      [others, done = std::move(done)](std::exception_ptr err) { done(err, std::move(*others)); });
}

void JobRendezvous::publish_failure(int round, int node_rank, int restart_count,
                                    std::vector<WorkerFailure> failures, Done done) {
  bridge_->run(
      [=](Store& s) { round_ops::publish_failure(s, round, node_rank, restart_count, failures); },
      unless_moved(std::move(done)));
}

void JobRendezvous::join_through(RendezvousProtocol* protocol, RoundStores* round_stores,
                                 int after_round, NodeInfo self,
                                 std::function<void(std::exception_ptr, RankAssignment)> done) {
  bridge_->call<RankAssignment>(
      [protocol, round_stores, after_round, self](Store& s) {
        auto on_rank_known = [round_stores, &s](int round, int node_rank, NodeInfo* me) {
          if (round_stores == nullptr || node_rank != 0) return;
          me->store_port = round_stores->open(
              round, [&s](int port) { return round_ops::claim_worker_port(s, port); });
        };
        RankAssignment a = protocol->join(s, after_round, self, on_rank_known);
        // Every node of the new round has left the earlier ones (stopped its workers there).
        if (round_stores != nullptr) round_stores->close_before(a.round);
        return a;
      },
      std::move(done));
}

void JobRendezvous::publish_running(int round, int node_rank, double started_at, Done done) {
  bridge_->run([=](Store& s) { round_ops::publish_running(s, round, node_rank, started_at); },
               unless_moved(std::move(done)));
}

void JobRendezvous::publish_success(int round, int node_rank, int nnodes, Done done) {
  bridge_->run([=](Store& s) { round_ops::publish_success(s, round, node_rank, nnodes); },
               unless_moved(std::move(done)));
}

void JobRendezvous::start_hang_probe(int round,
                                     std::function<void(std::exception_ptr, int64_t)> done) {
  auto id = std::make_shared<int64_t>(0);
  bridge_->run_status([=](Store& s) { *id = round_ops::start_hang_probe(s, round); },
                      [id, done = std::move(done)](std::exception_ptr err) { done(err, *id); });
}

void JobRendezvous::latest_hang_probe(int round,
                                      std::function<void(std::exception_ptr, int64_t)> done) {
  auto id = std::make_shared<int64_t>(0);
  bridge_->run_status([=](Store& s) { *id = round_ops::latest_hang_probe(s, round); },
                      [id, done = std::move(done)](std::exception_ptr err) { done(err, *id); });
}

void JobRendezvous::publish_hang_answers(int round, int64_t probe, int node_rank,
                                         std::string record, Done done) {
  bridge_->run_status(
      [=](Store& s) { round_ops::publish_hang_answers(s, round, probe, node_rank, record); },
      std::move(done));
}

void JobRendezvous::hang_answers(
    int round, int64_t probe, int nnodes,
    std::function<void(std::exception_ptr, std::vector<std::optional<std::string>>)> done) {
  auto records = std::make_shared<std::vector<std::optional<std::string>>>();
  bridge_->run_status(
      [=](Store& s) { *records = round_ops::hang_answers(s, round, probe, nnodes); },
      [records, done = std::move(done)](std::exception_ptr err) {
        done(err, std::move(*records));
      });
}

void JobRendezvous::publish_status(
    int node_rank, int nnodes, std::string record,
    std::function<void(std::exception_ptr, std::vector<std::string>)> done) {
  // On a thread of its own: an elastic agent's store thread blocks in its membership watch for
  // seconds at a time, and a status record waiting behind it would be stale when it lands.
  auto records = std::make_shared<std::vector<std::string>>();
  bridge_->run_status(
      [=](Store& s) { *records = round_ops::publish_status(s, node_rank, nnodes, record); },
      [records, done = std::move(done)](std::exception_ptr err) {
        done(err, std::move(*records));
      });
}

void JobRendezvous::publish_abort(int round, int node_rank, std::string detail, Done done) {
  // Urgent: a rendezvous may still be waiting on the store thread.
  bridge_->run_urgent(
      [=](Store& s) {
        Outcome o;
        o.kind = Outcome::kAborted;
        o.node_rank = node_rank;
        o.detail = detail + " on node " + std::to_string(node_rank);
        o.restarts = round_ops::restarts_after(s, round - 1);
        round_ops::publish_outcome(s, std::max(round, 0), o);
      },
      unless_moved(std::move(done)));
}

void JobRendezvous::collect_failures(
    int round, int nnodes,
    std::function<void(std::exception_ptr, std::vector<WorkerFailure>)> done) {
  bridge_->call<std::vector<WorkerFailure>>(
      [=](Store& s) { return round_ops::collect_failures(s, round, nnodes); }, std::move(done));
}

void JobRendezvous::exit_barrier(int round, int nnodes, std::chrono::milliseconds timeout,
                                 Done done) {
  const bool wait = hosts_store() && nnodes > 1;
  bridge_->run([=](Store& s) { round_ops::exit_barrier(s, round, nnodes, wait, timeout); },
               unless_moved(std::move(done)));
}

}  // namespace cohort::launch
