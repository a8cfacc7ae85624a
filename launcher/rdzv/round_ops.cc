#include "rdzv/round_ops.h"

#include <cstdio>
#include <sstream>

#include "cohort/base/duration_text.h"

namespace cohort::launch {
namespace round_ops {

std::vector<NodeInfo> exchange_node_info(Store& store, int round, const NodeInfo& self, int nnodes,
                                         std::chrono::milliseconds timeout) {
  store.set(keys::node(round, self.node_rank), to_json(self));
  std::vector<std::string> node_keys;
  for (int i = 0; i < nnodes; ++i) node_keys.push_back(keys::node(round, i));
  try {
    store.wait(node_keys, timeout);
  } catch (const StoreTimeoutError& e) {
    std::string missing;
    for (int i = 0; i < nnodes; ++i) {
      std::vector<std::string> one{keys::node(round, i)};
      if (!store.check(one)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    }
    throw StoreTimeoutError("rendezvous timed out after " + in_seconds(timeout) +
                                ": node rank(s) " + missing + " of " + std::to_string(nnodes) +
                                " did not join",
                            e.key(), e.address());
  }
  std::vector<NodeInfo> nodes;
  for (const auto& text : store.multi_get(node_keys)) nodes.push_back(node_info_from_json(text));
  return nodes;
}

std::optional<Outcome> outcome_of(Store& store, int round) {
  std::vector<std::string> k{keys::outcome(round)};
  if (!store.check(k)) return std::nullopt;
  return outcome_from_json(store.get(k[0]));
}

int restarts_after(Store& store, int round) {
  if (round < 0) return 0;
  auto o = outcome_of(store, round);
  return o ? o->restarts : 0;
}

void publish_outcome(Store& store, int round, Outcome outcome) {
  if (outcome.decided_at == 0) outcome.decided_at = wall_clock_now();
  store.compare_set(keys::outcome(round), "", to_json(outcome));
}

void publish_running(Store& store, int round, int node_rank, double started_at) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", started_at);
  store.set(keys::running(round, node_rank), text);
}

bool claim_worker_port(Store& store, int port) {
  // An add has one first caller however many race: exactly one claim of a port sees 1.
  return store.add(keys::worker_port(port), 1) == 1;
}

void publish_failure(Store& store, int round, int node_rank, int restart_count,
                     const std::vector<WorkerFailure>& failures) {
  store.set(keys::failures(round, node_rank), to_json(failures));
  Outcome o;
  o.kind = Outcome::kFailed;
  o.node_rank = node_rank;
  o.restarts = restart_count + 1;
  if (!failures.empty()) {
    o.first_failure = failures.front();
    o.detail = failures.front().reason;
  }
  publish_outcome(store, round, o);
}

void publish_success(Store& store, int round, int node_rank, int nnodes) {
  if (store.add(keys::done_count(round), 1) == nnodes) {
    Outcome o;
    o.kind = Outcome::kSucceeded;
    o.node_rank = node_rank;
    o.restarts = restarts_after(store, round - 1);
    publish_outcome(store, round, o);
  }
}

std::vector<WorkerFailure> collect_failures(Store& store, int round, int nnodes) {
  std::vector<WorkerFailure> all;
  for (int i = 0; i < nnodes; ++i) {
    std::vector<std::string> k{keys::failures(round, i)};
    if (!store.check(k)) continue;
    for (auto& f : failures_from_json(store.get(k[0]))) all.push_back(std::move(f));
  }
  // A node lost without a report of its own (elastic rendezvous) is in the outcome alone.
  if (auto o = outcome_of(store, round); o && o->first_failure) {
    bool known = false;
    for (const auto& f : all)
      known |= f.node_rank == o->first_failure->node_rank &&
               f.local_rank == o->first_failure->local_rank;
    if (!known) all.push_back(*o->first_failure);
  }
  return all;
}

void exit_barrier(Store& store, int round, int nnodes, bool wait_for_all,
                  std::chrono::milliseconds timeout) {
  std::string all_out = keys::exit_all(round);
  if (store.add(keys::exit_count(round), 1) == nnodes) store.set(all_out, "1");
  if (wait_for_all) {
    std::vector<std::string> k{all_out};
    store.wait(k, timeout);
  }
}

std::vector<std::string> publish_status(Store& store, int node_rank, int nnodes,
                                        const std::string& record) {
  store.set(keys::status(node_rank), record);
  std::vector<std::string> records;
  if (node_rank != 0) return records;
  for (int n = 0; n < nnodes; ++n) {
    const std::string key[] = {keys::status(n)};
    if (n == node_rank) {
      records.push_back(record);
    } else if (store.check(key)) {  // a node that has not published yet is left out
      records.push_back(store.get(key[0]));
    }
  }
  return records;
}

int64_t start_hang_probe(Store& store, int round) {
  return store.add(keys::hang_probe(round), 1);
}

int64_t latest_hang_probe(Store& store, int round) {
  return store.add(keys::hang_probe(round), 0);
}

void publish_hang_answers(Store& store, int round, int64_t probe, int node_rank,
                          const std::string& record) {
  store.set(keys::hang_answers(round, static_cast<int>(probe), node_rank), record);
}

std::vector<std::optional<std::string>> hang_answers(Store& store, int round, int64_t probe,
                                                     int nnodes) {
  std::vector<std::optional<std::string>> out;
  for (int n = 0; n < nnodes; ++n) {
    const std::string key[] = {keys::hang_answers(round, static_cast<int>(probe), n)};
    if (store.check(key)) {
      out.push_back(store.get(key[0]));
    } else {
      out.push_back(std::nullopt);
    }
  }
  return out;
}

}  // namespace round_ops
}  // namespace cohort::launch
