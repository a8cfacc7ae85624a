#include "ctl/status_view.h"

#include <cstdio>
#include <sstream>

#include "failure/failure_report.h"
#include "failure/json_text.h"

namespace cohort::launch {
namespace {

using nlohmann::json;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "0.4 s", "12 s", "3 min", "2.5 h"; "-" for unknown.
std::string age(double seconds) {
  if (seconds < 0) return "-";
  if (seconds < 10) return fixed(seconds, 1) + " s";
  if (seconds < 120) return fixed(seconds, 0) + " s";
  if (seconds < 7200) return fixed(seconds / 60, 0) + " min";
  return fixed(seconds / 3600, 1) + " h";
}

double age_of(double updated, double now) {
  return updated > 0 ? std::max(0.0, now - updated) : -1;
}

std::string restarts_text(const JobStatus& job) {
  return std::to_string(job.restarts) + "/" +
         (job.max_restarts >= 0 ? std::to_string(job.max_restarts) : std::string("?"));
}

template <typename T, typename F>
std::string opt(const std::optional<T>& v, F format) {
  return v ? format(*v) : std::string("-");
}

// Columns padded to their widest cell.
std::string table(const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> width;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line = indent;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string host_of(const JobStatus& job, const NodeStatus& s) {
  if (!s.host.empty()) return s.host;
  for (const auto& n : job.nodes)
    if (n.node_rank == s.node_rank) return n.host;
  return "?";
}

// JSON with every character past ASCII escaped: C1 controls and bidirectional overrides that
// a client of the store wrote reach a terminal showing the document as "\u009b", never raw
// (the C0 ones, ESC included, are escaped in any case).
std::string json_ascii(const json& j) {
  return j.dump(-1, ' ', true, json::error_handler_t::replace);
}

json failure_json(const WorkerFailure& f) {
  return json::parse(to_json(f));
}

}  // namespace

std::string format_bytes(long long bytes) {
  if (bytes < 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? std::to_string(bytes) + " B" : fixed(v, 1) + " " + units[u];
}

std::string render_job_list(const std::vector<JobStatus>& jobs, double now) {
  if (jobs.empty()) return "no jobs in this store\n";
  std::vector<std::vector<std::string>> rows{
      {"RUN ID", "ROUND", "NODES", "WORKERS", "STATE", "RESTARTS", "UPDATED"}};
  for (const auto& j : jobs) {
    double a = age_of(j.updated, now);
    rows.push_back({j.run_id, j.round >= 0 ? std::to_string(j.round) : "-",
                    std::to_string(j.nnodes), std::to_string(j.workers), j.state, restarts_text(j),
                    a < 0 ? "-" : age(a) + " ago"});
  }
  return table(rows, "");
}

std::string render_job_detail(const JobStatus& job, double now) {
  std::ostringstream os;
  double a = age_of(job.updated, now);
  os << "job " << job.run_id << ": " << job.state << ", round "
     << (job.round >= 0 ? std::to_string(job.round) : "-") << ", " << job.nnodes << " node"
     << (job.nnodes == 1 ? "" : "s") << ", " << job.workers << " worker"
     << (job.workers == 1 ? "" : "s") << ", restarts " << restarts_text(job);
  if (a >= 0) os << ", updated " << age(a) << " ago";
  os << "\n";

  for (const auto& s : job.node_status) {
    double na = age_of(s.updated, now);
    os << "\nnode " << s.node_rank << " (" << host_of(job, s) << "): " << s.state << ", round "
       << s.round << (na >= 0 ? ", updated " + age(na) + " ago" : "") << "\n";
    std::vector<std::vector<std::string>> rows{{"RANK", "LOCAL", "PID", "STATE", "HEARTBEAT",
                                                "STEP", "STEP TIME", "ITEMS/S", "COMM", "CPU",
                                                "RSS"}};
    for (const auto& w : s.workers) {
      rows.push_back({std::to_string(w.rank), std::to_string(w.local_rank), std::to_string(w.pid),
                      w.state, opt(w.heartbeat_age_s, [](double v) { return age(v) + " ago"; }),
                      opt(w.step, [](long long v) { return std::to_string(v); }),
                      opt(w.step_s, [](double v) { return fixed(v * 1000, 1) + " ms"; }),
                      opt(w.items_per_s, [](double v) { return fixed(v, 1); }),
                      opt(w.comm_share, [](double v) { return fixed(v * 100, 0) + "%"; }),
                      opt(w.cpu_s, [](double v) { return fixed(v, 1) + " s"; }),
                      opt(w.rss_bytes, [](long long v) { return format_bytes(v); })});
    }
    os << table(rows, "  ");
  }
  if (job.node_status.empty()) {
    os << "\nno node status published (an older cohortrun, or the job has not started its "
          "workers)\n";
    for (const auto& n : job.nodes)
      os << "  node " << n.node_rank << " (" << n.host << ", pid " << n.pid << "): " << n.nproc
         << " worker" << (n.nproc == 1 ? "" : "s") << "\n";
  }

  if (!job.stragglers.empty()) {
    os << "\nstragglers:\n";
    for (const auto& s : job.stragglers) {
      os << "  rank " << s.rank << " (" << s.host << "): compute time per step "
         << fixed(s.ratio, 1) << "x the median of the other ranks"
         << (s.reason.empty() ? "" : "; its GPU: " + s.reason) << "\n";
    }
  }

  if (!job.rounds.empty()) {
    // Each round, and how long the job took to heal into it: from the end of the round before
    // (its first failure, or a node's arrival) to every worker of this one running.
    os << "\nrounds:\n";
    std::vector<std::vector<std::string>> rows{
        {"ROUND", "WORKERS", "STARTED", "ENDED", "HEALED IN"}};
    for (const auto& r : job.rounds) {
      const double running = age_of(r.running_at, now), ended = age_of(r.ended_at, now);
      std::string end = r.outcome ? outcome_word(r.outcome->kind) : "-";
      if (r.outcome && ended >= 0) end += ", " + age(ended) + " ago";
      rows.push_back({std::to_string(r.round),
                      r.world_size > 0 ? std::to_string(r.world_size) : "-",
                      running >= 0 ? age(running) + " ago" : "-", end,
                      r.healed_in < 0   ? "-"
                      : r.healed_in < 1 ? fixed(r.healed_in * 1000, 0) + " ms"
                                        : fixed(r.healed_in, 1) + " s"});
    }
    os << table(rows, "  ");
  }

  if (job.hang && job.hang->report.verdict != HangReport::Verdict::kProgressing) {
    const HangStatus& h = *job.hang;
    os << "\nhang (probe " << h.probe << ", " << age(age_of(h.at, now))
       << " ago): " << verdict_name(h.report.verdict) << ": " << h.report.summary << "\n";
    for (size_t i = 0; i < h.report.culprits.size(); ++i) {
      const HangCulprit& c = h.report.culprits[i];
      os << "  culprit rank " << c.rank
         << (i < h.culprit_hosts.size() && !h.culprit_hosts[i].empty()
                 ? " (" + h.culprit_hosts[i] + ")"
                 : "")
         << ": " << c.reason << "\n";
      std::istringstream stack(c.stack);
      for (std::string line; std::getline(stack, line);) os << "    " << line << "\n";
    }
    for (const auto& w : h.report.waiting) os << "  " << w << "\n";
  }

  bool any_failure = false;
  for (const auto& r : job.rounds) {
    // A rescale (a node joining) or a success is no failure; a round with reports is one.
    const bool failed =
        r.outcome && (r.outcome->kind == Outcome::kFailed || r.outcome->kind == Outcome::kAborted);
    if (r.failures.empty() && !failed) continue;
    if (!any_failure) os << "\nfailures:\n";
    any_failure = true;
    os << "  round " << r.round << ": ";
    if (r.outcome) {
      os << outcome_word(r.outcome->kind) << " (restarts " << r.outcome->restarts << ")";
      if (!r.outcome->detail.empty()) os << ": " << r.outcome->detail;
    } else {
      os << "no outcome yet";
    }
    os << "\n";
    if (r.failures.empty()) continue;
    const WorkerFailure& root = r.failures[root_cause(r.failures)];
    os << "    root cause: rank " << root.global_rank << " (local rank " << root.local_rank
       << ", node " << root.node_rank << ", " << root.host << ", pid " << root.pid
       << "): " << root.reason << " (exit code " << root.exit_code << ")\n";
    if (!root.message.empty() && root.message != root.reason)
      os << "      message: " << root.message << "\n";
    if (!root.gpu.empty()) os << "      gpu: " << root.gpu << "\n";
    auto suspects = timeout_suspects(r.failures, r.world_size);
    if (!suspects.empty()) {
      os << "      it timed out waiting; ranks that had not failed (one was late or hung): "
         << rank_list(suspects) << "\n";
    }
    for (const auto& f : r.failures) {
      if (&f == &root) continue;
      os << "    also: rank " << f.global_rank << " (" << f.host << "): " << f.reason << "\n";
    }
  }

  if (!job.problems.empty()) {
    os << "\nunreadable records:\n";
    for (const auto& p : job.problems) os << "  " << p << "\n";
  }
  return os.str();
}

std::string job_list_json(const std::vector<JobStatus>& jobs, double now) {
  json list = json::array();
  for (const auto& j : jobs) {
    list.push_back({{"run_id", j.run_id},
                    {"round", j.round},
                    {"nnodes", j.nnodes},
                    {"workers", j.workers},
                    {"state", j.state},
                    {"restarts", j.restarts},
                    {"max_restarts", j.max_restarts},
                    {"updated", j.updated},
                    {"age_s", age_of(j.updated, now)}});
  }
  return json_ascii(json{{"jobs", list}});
}

std::string job_detail_json(const JobStatus& job, double now) {
  json j{{"run_id", job.run_id},
         {"round", job.round},
         {"nnodes", job.nnodes},
         {"workers", job.workers},
         {"state", job.state},
         {"restarts", job.restarts},
         {"max_restarts", job.max_restarts},
         {"updated", job.updated},
         {"age_s", age_of(job.updated, now)}};
  json nodes = json::array();
  for (const auto& s : job.node_status) nodes.push_back(json::parse(to_json(s)));
  j["nodes"] = nodes;
  json stragglers = json::array();
  for (const auto& s : job.stragglers) {
    stragglers.push_back(
        {{"rank", s.rank}, {"host", s.host}, {"ratio", s.ratio}, {"reason", s.reason}});
  }
  j["stragglers"] = stragglers;
  j["hang"] = job.hang ? json::parse(to_json(*job.hang)) : json(nullptr);
  json rounds = json::array();
  for (const auto& r : job.rounds) {
    json jr{{"round", r.round}, {"world_size", r.world_size}};
    jr["running_at"] = r.running_at > 0 ? json(r.running_at) : json(nullptr);
    jr["ended_at"] = r.ended_at > 0 ? json(r.ended_at) : json(nullptr);
    jr["healed_in_s"] = r.healed_in >= 0 ? json(r.healed_in) : json(nullptr);
    jr["outcome"] = r.outcome ? json::parse(to_json(*r.outcome)) : json(nullptr);
    json fs = json::array();
    for (const auto& f : r.failures) fs.push_back(failure_json(f));
    jr["failures"] = fs;
    jr["root_cause"] =
        r.failures.empty() ? json(nullptr) : failure_json(r.failures[root_cause(r.failures)]);
    jr["timeout_suspects"] = timeout_suspects(r.failures, r.world_size);
    rounds.push_back(jr);
  }
  j["rounds"] = rounds;
  j["problems"] = job.problems;
  return json_ascii(j);
}

}  // namespace cohort::launch
