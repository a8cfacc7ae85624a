#include "ctl/job_status.h"

#include <algorithm>
#include <charconv>

#include "cohort/error.h"
#include "cohort/rdzv/store.h"
#include "rdzv/round_ops.h"
#include "rdzv/store_keys.h"

namespace cohort::launch {
namespace {

// "12" -> 12; nullopt for anything else.
std::optional<int> number(std::string_view s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// The values of `keys`, a batch per request; a key deleted since it was listed (a job cleaning
// up) is left out instead of waited for. Any client of a tokenless store may write these keys:
// a value the store client refuses as too large (TcpStoreOptions::max_reply_bytes) is left out,
// and once kMaxJobBytes have been read the rest is, each named in *problems.
std::map<std::string, std::string> fetch(Store& store, const std::vector<std::string>& keys,
                                         std::vector<std::string>* problems) {
  constexpr size_t kBatch = 16;  // at most 16 x the client's per-value bound in one reply
  std::map<std::string, std::string> out;
  size_t bytes = 0;
  auto keep = [&](const std::string& k, std::string v) {
    bytes += v.size();
    out[k] = std::move(v);
  };
  for (size_t at = 0; at < keys.size(); at += kBatch) {
    if (bytes > kMaxJobBytes) {
      problems->push_back(std::to_string(keys.size() - at) + " records not read: the job's " +
                          "records read so far reach " + std::to_string(kMaxJobBytes >> 20) +
                          " MiB");
      break;
    }
    const std::vector<std::string> batch(
        keys.begin() + static_cast<std::ptrdiff_t>(at),
        keys.begin() + static_cast<std::ptrdiff_t>(std::min(at + kBatch, keys.size())));
    try {
      if (store.check(batch)) {
        auto values = store.multi_get(batch);
        for (size_t i = 0; i < batch.size() && i < values.size(); ++i)
          keep(batch[i], std::move(values[i]));
        continue;
      }
    } catch (const StoreError&) {
      // One of them is too large, most likely: key by key below.
    }
    for (const auto& k : batch) {
      try {
        std::vector<std::string> one{k};
        if (store.check(one)) keep(k, store.get(k));
      } catch (const StoreError& e) {
        problems->push_back(k + ": not read: " + e.what());
      }
    }
  }
  return out;
}

}  // namespace

std::string outcome_word(Outcome::Kind kind) {
  switch (kind) {
    case Outcome::kSucceeded:
      return "succeeded";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kAborted:
      return "aborted";
    case Outcome::kRescale:
      return "rescale";
  }
  return "unknown";
}

std::map<std::string, std::vector<std::string>> group_jobs(
    const std::vector<std::string>& store_keys) {
  std::map<std::string, std::vector<std::string>> jobs;
  for (const auto& k : store_keys) {
    std::string rest;
    if (auto run = keys::split_run(k, &rest)) jobs[*run].push_back(std::move(rest));
  }
  return jobs;
}

JobStatus read_job(Store& store, const std::string& run_id,
                   const std::vector<std::string>& job_keys) {
  JobStatus job;
  job.run_id = run_id;
  const std::string prefix = keys::run_prefix(run_id) + "/";

  // Which records there are: round/<r>/node/<n>, round/<r>/outcome, round/<r>/failures/<n>,
  // round/<r>/running/<n>, status/<n>, rdzv/current. Everything else (counters, barriers, elastic
  // bookkeeping) is not read.
  std::vector<std::string> wanted;
  std::map<int, std::vector<std::string>> node_keys, failure_keys, running_keys;
  std::map<int, std::string> outcome_keys;
  std::vector<std::string> status_keys;
  std::string current_key;
  for (const auto& k : job_keys) {
    using Kind = keys::ParsedKey::Kind;
    const keys::ParsedKey key = keys::parse(k);
    const std::string full = prefix + k;
    switch (key.kind) {
      case Kind::kNode:
        node_keys[key.round].push_back(full);
        break;
      case Kind::kOutcome:
        outcome_keys[key.round] = full;
        break;
      case Kind::kFailures:
        failure_keys[key.round].push_back(full);
        break;
      case Kind::kRunning:
        running_keys[key.round].push_back(full);
        break;
      case Kind::kStatus:
        status_keys.push_back(full);
        break;
      case Kind::kCurrentRound:
        current_key = full;
        break;
      case Kind::kDoneCount:
      case Kind::kExitCount:
      case Kind::kExitAll:
        job.round = std::max(job.round, key.round);
        continue;
      default:
        continue;
    }
    if (key.round >= 0) job.round = std::max(job.round, key.round);
    wanted.push_back(full);
  }
  auto values = fetch(store, wanted, &job.problems);
  auto value = [&](const std::string& k) -> const std::string* {
    auto it = values.find(k);
    return it == values.end() ? nullptr : &it->second;
  };
  auto problem = [&](const std::string& k, const std::exception& e) {
    job.problems.push_back(k + ": " + e.what());
  };

  // The elastic rendezvous names the round being formed before any node record of it exists.
  if (const std::string* v = current_key.empty() ? nullptr : value(current_key)) {
    if (auto r = number(*v)) job.round = std::max(job.round, *r);
  }

  // The nodes of every round (the latest's are the job's nodes; each round's give its world).
  std::map<int, int64_t> world_of;
  std::map<int, std::string> max_restarts_setting;
  for (const auto& [r, ks] : node_keys) {
    std::vector<NodeInfo> nodes;
    for (const auto& k : ks) {
      const std::string* v = value(k);
      if (!v) continue;
      try {
        nodes.push_back(node_info_from_json(*v));
      } catch (const std::exception& e) {
        problem(k, e);
      }
    }
    std::sort(nodes.begin(), nodes.end(),
              [](const NodeInfo& a, const NodeInfo& b) { return a.node_rank < b.node_rank; });
    for (const auto& n : nodes) {
      world_of[r] += n.nproc;
      if (auto it = n.settings.find("--max-restarts"); it != n.settings.end())
        max_restarts_setting[r] = it->second;
    }
    if (r == job.round) job.nodes = std::move(nodes);
  }
  job.nnodes = static_cast<int>(job.nodes.size());
  for (const auto& n : job.nodes) job.workers += n.nproc;
  if (!max_restarts_setting.empty()) {
    if (auto m = number(max_restarts_setting.rbegin()->second)) job.max_restarts = *m;
  }

  // Outcomes and failures, by round.
  std::map<int, RoundRecord> rounds;
  for (const auto& [r, k] : outcome_keys) {
    const std::string* v = value(k);
    if (!v) continue;
    try {
      rounds[r].outcome = outcome_from_json(*v);
    } catch (const std::exception& e) {
      problem(k, e);
    }
  }
  for (const auto& [r, ks] : failure_keys) {
    for (const auto& k : ks) {
      const std::string* v = value(k);
      if (!v) continue;
      try {
        for (auto& f : failures_from_json(*v)) rounds[r].failures.push_back(std::move(f));
      } catch (const std::exception& e) {
        problem(k, e);
      }
    }
  }
  // When each round's workers were running on every node of it.
  for (const auto& [r, ks] : running_keys) {
    double latest = 0;
    size_t known = 0;
    for (const auto& k : ks) {
      const std::string* v = value(k);
      double t = 0;
      if (v == nullptr || std::from_chars(v->data(), v->data() + v->size(), t).ec != std::errc())
        continue;
      latest = std::max(latest, t);
      ++known;
    }
    const auto nodes = node_keys.find(r);
    RoundRecord& rec = rounds[r];  // listed even while some node has not started its workers
    if (known > 0 && nodes != node_keys.end() && known >= nodes->second.size())
      rec.running_at = latest;
  }
  double previous_end = 0;  // when the round before ended (0: none, or unknown)
  for (auto& [r, rec] : rounds) {
    rec.round = r;
    rec.world_size = world_of.count(r) ? world_of[r] : 0;
    if (rec.outcome) {
      rec.ended_at = rec.outcome->first_failure ? rec.outcome->first_failure->timestamp
                                                : rec.outcome->decided_at;
    }
    if (previous_end > 0 && rec.running_at > 0)
      rec.healed_in = std::max(0.0, rec.running_at - previous_end);
    previous_end = rec.ended_at;
    // As round_ops::collect_failures: a node lost without a report of its own (elastic) is in
    // the outcome alone.
    if (rec.outcome && rec.outcome->first_failure) {
      const auto& ff = *rec.outcome->first_failure;
      bool known = std::any_of(rec.failures.begin(), rec.failures.end(), [&](const auto& f) {
        return f.node_rank == ff.node_rank && f.local_rank == ff.local_rank;
      });
      if (!known) rec.failures.push_back(ff);
    }
    if (rec.outcome) job.restarts = std::max(job.restarts, rec.outcome->restarts);
    job.rounds.push_back(std::move(rec));
  }

  // What the agents say now.
  for (const auto& k : status_keys) {
    const std::string* v = value(k);
    if (!v) continue;
    try {
      job.node_status.push_back(node_status_from_json(*v));
    } catch (const std::exception& e) {
      problem(k, e);
    }
  }
  std::sort(job.node_status.begin(), job.node_status.end(),
            [](const NodeStatus& a, const NodeStatus& b) { return a.node_rank < b.node_rank; });
  const NodeStatus* lead = nullptr;  // node rank 0's, or the lowest there is
  for (const auto& s : job.node_status) {
    if (!lead) lead = &s;
    job.updated = std::max(job.updated, s.updated);
    job.restarts = std::max(job.restarts, s.restarts);
    if (s.round > job.round) job.round = s.round;
    if (!s.stragglers.empty()) job.stragglers = s.stragglers;
  }
  for (const auto& s : job.node_status) {
    if (s.hang && s.round == job.round && (!job.hang || s.hang->at > job.hang->at))
      job.hang = s.hang;
  }

  // The state: the latest round's outcome once decided; else the agents' own word.
  std::optional<Outcome> latest;
  if (!job.rounds.empty() && job.rounds.back().round == job.round)
    latest = job.rounds.back().outcome;
  if (lead) {
    job.state = lead->state;
    job.nnodes = std::max(job.nnodes, lead->nnodes);
    job.max_restarts = lead->max_restarts;
    if (job.workers == 0)
      for (const auto& s : job.node_status) job.workers += static_cast<int64_t>(s.workers.size());
  } else if (job.round >= 0) {
    job.state = job.nodes.empty() ? "rendezvous" : "running";
  }
  // A decided outcome of the latest round outranks the records: agents publish only while their
  // workers run, so the last record of a finished job still says "running".
  if (latest) job.state = outcome_word(latest->kind);
  return job;
}

}  // namespace cohort::launch
