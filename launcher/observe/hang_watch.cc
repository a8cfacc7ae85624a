#include "observe/hang_watch.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cohort/base/json_number.h"
#include "cohort/error.h"
#include "rdzv/job_rendezvous.h"
#include "workers/worker_group.h"

namespace cohort::launch {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

double seconds_of(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::chrono::milliseconds ms_of(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

std::chrono::milliseconds HangWatchOptions::timeout() const {
  if (stop_after.count() > 0 && report_after.count() > 0) return std::min(stop_after, report_after);
  return std::max(stop_after, report_after);
}

std::string encode_node_answers(int node_rank, const std::string& host,
                                const std::vector<RankProbe>& workers,
                                const std::vector<std::optional<std::string>>& answers) {
  json ws = json::array();
  for (size_t i = 0; i < workers.size(); ++i) {
    const RankProbe& w = workers[i];
    json x = {{"rank", w.rank},
              {"local_rank", w.local_rank},
              {"pid", w.pid},
              {"silent_s", w.silent_s},
              {"beaten", w.beaten},
              {"gpu", w.gpu},
              {"by_hand", w.beaten_by_hand}};
    if (i < answers.size() && answers[i]) {
      x["answer"] = *answers[i];  // the worker's line, as it wrote it
    } else {
      x["no_answer"] = w.no_answer;
    }
    ws.push_back(std::move(x));
  }
  return json{{"node_rank", node_rank}, {"host", host}, {"workers", std::move(ws)}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::vector<RankProbe> ranks_from_answers(const RankAssignment& a,
                                          const std::vector<std::optional<std::string>>& records) {
  std::vector<RankProbe> out;
  int base = 0;
  for (int n = 0; n < a.nnodes; ++n) {
    const int nproc = static_cast<size_t>(n) < a.nodes.size() ? a.nodes[n].nproc : 0;
    const std::string host = static_cast<size_t>(n) < a.nodes.size() ? a.nodes[n].host : "?";
    const bool have = static_cast<size_t>(n) < records.size() && records[n].has_value();
    if (!have) {
      for (int lr = 0; lr < nproc; ++lr) {
        RankProbe p;
        p.rank = base + lr;
        p.node_rank = n;
        p.local_rank = lr;
        p.host = host;
        p.no_answer = "its node (" + host + ") did not answer in time";
        out.push_back(std::move(p));
      }
      base += nproc;
      continue;
    }
    try {
      const json j = json::parse(*records[n]);
      const std::string node_host = j.value("host", host);
      for (const auto& w : j.at("workers")) {
        RankProbe p;
        p.rank = json_number::required<int>(w, "rank");
        p.node_rank = n;
        p.local_rank = json_number::field<int>(w, "local_rank", 0);
        p.host = node_host;
        p.pid = json_number::field<int>(w, "pid", 0);
        p.silent_s = w.value("silent_s", 0.0);
        p.beaten = w.value("beaten", false);
        p.beaten_by_hand = w.value("by_hand", false);
        p.gpu = w.value("gpu", "");
        if (w.contains("answer") && w["answer"].is_string()) {
          try {
            p.answer = hang_probe::parse_answer(w["answer"].get<std::string>());
            if (p.answer->pid > 0) p.pid = p.answer->pid;
          } catch (const ProtocolError& e) {
            p.no_answer = e.what();
          }
        } else {
          p.no_answer = w.value("no_answer", "no answer");
        }
        out.push_back(std::move(p));
      }
    } catch (const std::exception& e) {
      throw ProtocolError("node " + std::to_string(n) + "'s answers to a hang probe are " +
                          "malformed: " + e.what());
    }
    base += nproc;
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.rank < y.rank; });
  return out;
}

HangWatch::HangWatch(LoopClock& clock, HangWatchOptions options,
                     std::shared_ptr<spdlog::logger> log, Events events)
    : clock_(clock),
      options_(options),
      log_(std::move(log)),
      events_(std::move(events)),
      collect_timer_(clock.make_timer()),
      again_timer_(clock.make_timer()) {}

HangWatch::~HangWatch() {
  stop();
}

void HangWatch::start_round(const RankAssignment& a, std::string host, WorkerGroup* group,
                            JobRendezvous* rdzv) {
  stop();
  if (!enabled()) return;
  alive_ = std::make_shared<int>(0);
  assignment_ = a;
  host_ = std::move(host);
  group_ = group;
  rdzv_ = rdzv;
  wanted_ = published_ = own_probe_ = 0;
  asking_ = probing_ = suspect_again_ = acted_ = false;
  last_logged_.clear();
  status_.reset();
}

void HangWatch::stop() {
  alive_ = std::make_shared<int>(0);  // the round's callbacks find theirs expired
  collect_timer_->cancel();
  again_timer_->cancel();
  group_ = nullptr;
  rdzv_ = nullptr;
  asking_ = probing_ = polling_ = false;
}

void HangWatch::suspect() {
  if (!group_ || !rdzv_ || acted_) return;
  if (probing_) {
    suspect_again_ = true;
    return;
  }
  // Another node's probe asked this node's workers moments ago: that node judges them (and looks
  // again when a wait nears the timeout). Starting one here would only supersede it.
  if (wanted_ > own_probe_ &&
      clock_.now() - asked_at_ < options_.answer_deadline + options_.nodes_deadline) {
    probe_again_in(options_.timeout());
    return;
  }
  start_probe();
}

void HangWatch::start_probe() {
  probing_ = true;
  suspect_again_ = false;
  again_timer_->cancel();
  rdzv_->start_hang_probe(assignment_.round, [this, alive = std::weak_ptr<int>(alive_)](
                                                 std::exception_ptr err, int64_t id) {
    if (alive.expired()) return;
    if (err) {
      probing_ = false;
      log_->warn("cannot start a hang probe through the store; trying again in {} s",
                 options_.timeout().count() / 1000.0);
      probe_again_in(options_.timeout());
      return;
    }
    own_probe_ = id;
    answer(id);
    collect(id, clock_.now() + options_.nodes_deadline);
  });
}

void HangWatch::poll() {
  if (!rdzv_ || polling_ || assignment_.nnodes < 2) return;  // alone, only this node asks
  polling_ = true;
  rdzv_->latest_hang_probe(assignment_.round, [this, alive = std::weak_ptr<int>(alive_)](
                                                  std::exception_ptr err, int64_t latest) {
    if (alive.expired()) return;
    polling_ = false;
    if (!err && latest > wanted_) answer(latest);
  });
}

void HangWatch::answer(int64_t id) {
  if (id <= wanted_ || !group_) return;
  wanted_ = id;
  asked_at_ = clock_.now();
  // A question still out to the workers answers this probe too: its record is published under
  // every probe id asked of this node meanwhile (several nodes may start probes at once).
  if (!asking_) ask_workers();
}

void HangWatch::ask_workers() {
  asking_ = true;
  group_->probe(wanted_, options_.answer_deadline,
                [this, alive = std::weak_ptr<int>(alive_)](std::vector<ProbeReply> replies) {
                  if (alive.expired() || !group_) return;
                  asking_ = false;
                  const auto now = std::chrono::steady_clock::now();
                  const std::vector<WorkerReading> readings = group_->readings();
                  std::vector<RankProbe> workers;
                  std::vector<std::optional<std::string>> answers;
                  for (const ProbeReply& r : replies) {
                    RankProbe p;
                    p.rank = assignment_.base_rank + r.local_rank;
                    p.local_rank = r.local_rank;
                    p.pid = r.pid;
                    p.no_answer = r.no_answer;
                    const WorkerReading& w = readings.at(static_cast<size_t>(r.local_rank));
                    p.beaten = w.last_beat.has_value();
                    p.beaten_by_hand = w.beaten_by_hand;
                    if (w.last_beat) {
                      p.silent_s = seconds_of(now - *w.last_beat);
                    } else if (w.hello_at) {
                      p.silent_s = seconds_of(now - *w.hello_at);
                    }
                    if (events_.gpu_note) p.gpu = events_.gpu_note(r.local_rank);
                    workers.push_back(std::move(p));
                    answers.push_back(r.answer);
                  }
                  const std::string record =
                      encode_node_answers(assignment_.node_rank, host_, workers, answers);
                  const int64_t from = std::max(published_ + 1, wanted_ - kMaxUnanswered + 1);
                  for (int64_t id = from; id <= wanted_; ++id) {
                    rdzv_->publish_hang_answers(assignment_.round, id, assignment_.node_rank,
                                                record, [](std::exception_ptr) {});
                  }
                  published_ = wanted_;
                });
}

void HangWatch::collect(int64_t id, Clock::time_point deadline) {
  rdzv_->hang_answers(
      assignment_.round, id, assignment_.nnodes,
      [this, id, deadline, alive = std::weak_ptr<int>(alive_)](
          std::exception_ptr err, std::vector<std::optional<std::string>> records) {
        if (alive.expired()) return;
        const bool all = !err && std::all_of(records.begin(), records.end(),
                                             [](const auto& r) { return r.has_value(); });
        if (all || clock_.now() >= deadline) {
          supersede_or_judge(id, std::move(records));
          return;
        }
        collect_timer_->start(100ms, [this, id, deadline] { collect(id, deadline); });
      });
}

void HangWatch::supersede_or_judge(int64_t id, std::vector<std::optional<std::string>> records) {
  // Nodes whose workers fall silent together (a data-parallel hang silences every rank) start a
  // probe each; the last one started judges, with every node's answer (each node answers every
  // probe asked of it), and the others leave it to that one.
  rdzv_->latest_hang_probe(assignment_.round, [this, id, records = std::move(records),
                                               alive = std::weak_ptr<int>(alive_)](
                                                  std::exception_ptr err, int64_t latest) {
    if (alive.expired()) return;
    if (err || latest <= id) {
      judge(id, records);
      return;
    }
    probing_ = suspect_again_ = false;  // the later probe covers those silences too
    log_->debug("hang probe {} left to probe {}, started since", id, latest);
    probe_again_in(options_.timeout());
  });
}

void HangWatch::judge(int64_t id, const std::vector<std::optional<std::string>>& records) {
  probing_ = false;
  std::vector<RankProbe> ranks;
  try {
    ranks = ranks_from_answers(assignment_, records);
  } catch (const ProtocolError& e) {
    log_->warn("hang probe {}: {}", id, e.what());
    probe_again_in(options_.timeout());
    return;
  }
  const double timeout_s = seconds_of(options_.timeout());
  HangReport report = analyse_hang(ranks, timeout_s);
  HangStatus s;
  s.probe = id;
  s.at = wall_clock_now();
  s.report = report;
  for (const auto& c : report.culprits) {
    auto it =
        std::find_if(ranks.begin(), ranks.end(), [&](const auto& r) { return r.rank == c.rank; });
    s.culprit_hosts.push_back(it == ranks.end() ? "" : it->host);
  }
  status_ = s;
  if (report.verdict == HangReport::Verdict::kHung) {
    if (report.summary != last_logged_) {
      log_->warn("the job is hung: {}", report.summary);
      last_logged_ = report.summary;
    }
    if (report.group_timeout_s > 0 && options_.stop_after.count() > 0 &&
        seconds_of(options_.stop_after) >= report.group_timeout_s) {
      log_->warn(
          "--worker-hang-timeout {} s is not below the process group's timeout ({} s): PyTorch "
          "ends the waiting ranks first",
          options_.stop_after.count() / 1000.0, report.group_timeout_s);
    }
    if (options_.stop_after.count() > 0 && report.hung_for_s >= seconds_of(options_.stop_after)) {
      act(report, ranks);
      return;
    }
    probe_again_in(options_.timeout());
  } else if (report.verdict == HangReport::Verdict::kWaiting && report.recheck_s) {
    probe_again_in(std::max<std::chrono::milliseconds>(ms_of(*report.recheck_s) + 100ms, 500ms));
  } else if (report.verdict == HangReport::Verdict::kQuiet) {
    probe_again_in(options_.timeout());
  }
  if (suspect_again_) suspect();
}

void HangWatch::act(const HangReport& report, const std::vector<RankProbe>& ranks) {
  acted_ = true;
  again_timer_->cancel();
  const HangCulprit& c = report.culprits.front();
  auto it =
      std::find_if(ranks.begin(), ranks.end(), [&](const auto& r) { return r.rank == c.rank; });
  const RankProbe culprit = it == ranks.end() ? RankProbe{} : *it;
  const bool local_and_running =
      group_ && culprit.node_rank == assignment_.node_rank &&
      static_cast<size_t>(culprit.local_rank) < group_->readings().size() &&
      group_->readings()[static_cast<size_t>(culprit.local_rank)].running;
  // No stack from its answer (it did not answer, or it is libcohort, whose answers carry none):
  // asked for one with SIGABRT (faulthandler, libcohort's fatal-signal handler), as only it is.
  const bool has_stack = culprit.answer && !culprit.answer->threads.empty();
  if (local_and_running && !has_stack && events_.hung_without_stack) {
    events_.hung_without_stack(culprit.local_rank, c.reason, report.waiting);
    return;
  }
  FailureSite site;
  site.node_rank = culprit.node_rank;
  site.local_rank = culprit.local_rank;
  site.global_rank = c.rank;
  site.host = culprit.host;
  site.pid = culprit.pid;
  // The hang began before anything its stop causes: it is the root cause.
  WorkerFailure f = make_failure(site, -SIGKILL, c.reason, wall_clock_now() - report.hung_for_s);
  f.traceback = !c.stack.empty()             ? c.stack
                : !culprit.no_answer.empty() ? "<no stack: " + culprit.no_answer + ">"
                                             : "<no stack: its answer carries none>";
  while (!f.traceback.empty() && f.traceback.back() == '\n') f.traceback.pop_back();
  f.gpu = culprit.gpu;
  f.waiting = report.waiting;
  if (events_.hung) events_.hung(std::move(f));
}

void HangWatch::probe_again_in(std::chrono::milliseconds d) {
  if (!group_ || acted_) return;
  again_timer_->start(d, [this] {
    // Only while one of this node's workers is still silent: otherwise the next silence asks.
    const auto now = std::chrono::steady_clock::now();
    const auto limit = options_.timeout();
    for (const auto& w : group_->readings()) {
      if (!w.running || !w.answers_probes) continue;
      const auto since = w.last_beat ? w.last_beat : w.hello_at;
      if (since && now - *since >= limit) {
        suspect();
        return;
      }
    }
  });
}

}  // namespace cohort::launch
