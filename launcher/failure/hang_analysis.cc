#include "failure/hang_analysis.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

namespace cohort::launch {
namespace {

using hang_probe::CollectiveEntry;
using hang_probe::ProbeAnswer;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

// PyTorch's default group is "0"; libcohort's groups are "cohort/<n>" (collective_progress.h).
std::string group_name(const std::string& g) {
  if (g == "0") return "the default group";
  if (g.rfind("cohort/", 0) == 0) return "libcohort's group " + g.substr(7);
  return "group " + g;
}

// The innermost frame of the main thread in torch/distributed/distributed_c10d.py: the
// operation it is inside (PyTorch 1.13 has no Flight Recorder), "" when none.
std::string op_from_stack(const ProbeAnswer& a) {
  for (const auto& t : a.threads) {
    if (!t.main) continue;
    static constexpr std::string_view kC10d = "/distributed_c10d.py";
    for (auto f = t.frames.rbegin(); f != t.frames.rend(); ++f) {
      if (std::string_view(f->file).ends_with(kC10d)) return f->function;
    }
    // DistributedDataParallel issues its gradient allreduce from inside backward().
    static constexpr std::string_view kAutograd = "/torch/autograd/";
    if (!t.frames.empty() && t.frames.back().file.find(kAutograd) != std::string::npos)
      return "the gradient allreduce in backward()";
  }
  return {};
}

// " ([520] Float)" from the Flight Recorder's `in` and `dtypes` ("[[520]]", "[\"Float\"]"):
// the input shapes and their types, or "" when unknown.
std::string call_shape(const CollectiveEntry& e) {
  std::string shapes, types;
  try {
    for (const auto& s : nlohmann::json::parse(e.in_sizes.empty() ? "[]" : e.in_sizes)) {
      if (!shapes.empty()) shapes += ", ";
      shapes += s.dump();
    }
    std::set<std::string> seen;
    for (const auto& t : nlohmann::json::parse(e.dtypes.empty() ? "[]" : e.dtypes)) {
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      if (seen.insert(name).second) types += (types.empty() ? "" : "/") + name;
    }
  } catch (const nlohmann::json::exception&) {
    return {};
  }
  if (shapes.empty() && types.empty()) return {};
  return " (" + shapes + (shapes.empty() || types.empty() ? "" : " ") + types + ")";
}

// What one rank says about one group.
struct Member {
  const RankProbe* rank = nullptr;
  std::optional<int64_t> issued;
  std::map<int64_t, const CollectiveEntry*> pending;  // not done, by seq
  const CollectiveEntry* last_done = nullptr;
  bool recorded = false;  // its answer lists this group's collectives (libcohort does)

  bool answered() const { return rank->answer.has_value(); }
  bool has_fr() const { return answered() && rank->answer->flight_recorder; }
  const CollectiveEntry* pending_at(int64_t seq) const {
    auto it = pending.find(seq);
    return it == pending.end() ? nullptr : it->second;
  }
  // How long it has waited in collective `seq`; nullopt when it is not waiting in it.
  // `others_behind`: some member has not issued `seq` (then a member that has waits in it).
  std::optional<double> wait_age(int64_t seq, bool others_behind) const {
    if (const CollectiveEntry* e = pending_at(seq)) {
      if (e->since > 0 && rank->answer->time >= e->since) return rank->answer->time - e->since;
      return rank->silent_s;
    }
    // Its collectives are recorded (the Flight Recorder, libcohort): this one is done.
    if (has_fr() || recorded) return std::nullopt;
    // PyTorch 1.13: no record. It waits when a member is behind, or when its main thread is in
    // a collective call (or in backward(), where DDP waits); its silence is the best estimate.
    if (others_behind || (answered() && !op_from_stack(*rank->answer).empty()))
      return rank->silent_s;
    return std::nullopt;
  }
  // "all_reduce ([520] Float)" for collective `seq`, from whatever this rank knows.
  std::string describe(int64_t seq) const {
    if (const CollectiveEntry* e = pending_at(seq)) return e->op + call_shape(*e);
    if (answered()) {
      std::string op = op_from_stack(*rank->answer);
      if (!op.empty()) return op;
    }
    return "a collective";
  }
};

struct Group {
  std::string name;
  std::set<int> ranks;
  std::map<int, Member> members;  // by rank, for every member cohortrun asked
};

struct Finding {
  enum Kind { kBehind, kNoAnswer, kDesync, kStuck } kind = kBehind;
  std::string group;
  int64_t seq = 0;
  std::string what;                             // "all_reduce (in [[520]] Float)"
  std::vector<std::pair<int, double>> waiters;  // rank, seconds waited
  std::map<int, std::string> culprits;          // rank -> reason
  double age = 0;                               // the decisive wait
  // Sequence numbers mean something to a reader (the Flight Recorder's and libcohort's start at
  // 1; PyTorch 1.13's start at a random number shared by the group).
  bool numbered = false;
  double timeout_s = 0;
};

std::vector<Group> groups_of(const std::vector<RankProbe>& ranks) {
  std::map<std::string, Group> groups;
  for (const auto& r : ranks) {
    if (!r.answer) continue;
    for (const auto& g : r.answer->groups) {
      Group& group = groups[g.name];
      group.name = g.name;
      group.ranks.insert(g.ranks.begin(), g.ranks.end());
    }
  }
  for (auto& [name, group] : groups) {
    for (const auto& r : ranks) {
      if (!group.ranks.count(r.rank)) continue;
      Member m;
      m.rank = &r;
      if (r.answer) {
        for (const auto& g : r.answer->groups)
          if (g.name == name) m.issued = g.seq;
        int64_t highest = -1;
        for (const auto& c : r.answer->collectives) {
          if (c.group != name || c.p2p) continue;
          highest = std::max(highest, c.seq);
          if (!c.done) {
            m.pending[c.seq] = &c;
          } else if (!m.last_done || c.seq > m.last_done->seq) {
            m.last_done = &c;
          }
        }
        if (!m.issued && highest >= 0) m.issued = highest;
        m.recorded = highest >= 0;
      }
      group.members.emplace(r.rank, m);
    }
  }
  std::vector<Group> out;
  for (auto& [name, g] : groups) out.push_back(std::move(g));
  return out;
}

// The finding of one group, if any of its members waits.
std::optional<Finding> examine(const Group& g) {
  std::optional<int64_t> top;
  for (const auto& [rank, m] : g.members)
    if (m.issued) top = std::max(top.value_or(*m.issued), *m.issued);
  if (!top) return std::nullopt;
  const int64_t seq = *top;
  Finding f;
  f.group = g.name;
  f.seq = seq;
  std::vector<int> behind, unknown, at_top;
  for (const auto& [rank, m] : g.members) {
    if (!m.issued) {
      unknown.push_back(rank);
    } else if (*m.issued < seq) {
      behind.push_back(rank);
    } else {
      at_top.push_back(rank);
    }
  }
  for (int r : at_top) {
    const Member& m = g.members.at(r);
    if (auto age = m.wait_age(seq, !behind.empty())) {
      f.waiters.emplace_back(r, *age);
      if (f.what.empty() || f.what == "a collective") f.what = m.describe(seq);
      f.numbered = f.numbered || m.has_fr();
      if (const CollectiveEntry* e = m.pending_at(seq); e && e->timeout_s > 0)
        f.timeout_s = f.timeout_s > 0 ? std::min(f.timeout_s, e->timeout_s) : e->timeout_s;
    }
  }
  if (f.waiters.empty()) return std::nullopt;
  for (const auto& [r, age] : f.waiters) f.age = std::max(f.age, age);
  f.numbered = f.numbered || g.name.rfind("cohort/", 0) == 0;
  const std::string in = f.what +
                         (f.numbered ? ", collective " + std::to_string(seq) + " of " : " on ") +
                         group_name(g.name);
  std::vector<int> waiting;
  for (const auto& [r, age] : f.waiters) waiting.push_back(r);
  const std::string waited = ", that " + ranks_phrase(waiting) +
                             (waiting.size() == 1 ? " has" : " have") + " waited in for " +
                             seconds(f.age);
  if (!behind.empty()) {
    f.kind = Finding::kBehind;
    for (int r : behind) {
      const Member& m = g.members.at(r);
      const int64_t fewer = seq - *m.issued;
      std::string last;
      if (f.numbered) {
        last = "; its last was collective " + std::to_string(*m.issued) +
               (m.last_done && m.last_done->seq == *m.issued ? " (" + m.last_done->op + ")" : "");
      } else {
        last = "; it has issued " + std::to_string(fewer) + " collective" +
               (fewer == 1 ? "" : "s") + " fewer";
      }
      f.culprits[r] = "hung: never entered " + in + waited + last;
    }
    return f;
  }
  if (!unknown.empty()) {
    f.kind = Finding::kNoAnswer;
    for (int r : unknown) {
      const RankProbe& p = *g.members.at(r).rank;
      f.culprits[r] = "hung: " + (p.no_answer.empty() ? "did not answer" : p.no_answer) +
                      ", while " + ranks_phrase(waiting) + " waited in " + in + " for " +
                      seconds(f.age);
    }
    return f;
  }
  // Every member issued `seq`: the same operation everywhere? (Unknown calls cannot differ.)
  std::map<std::string, std::vector<int>> by_call;
  bool comparable = true;
  for (int r : at_top) {
    const Member& m = g.members.at(r);
    std::string call = m.describe(seq);
    comparable = comparable && call != "a collective";
    // A scatter's or a gather's sizes differ between its root and the others by design.
    if (const CollectiveEntry* e = m.pending_at(seq);
        e && (e->op == "scatter" || e->op == "gather"))
      call = e->op;
    by_call[call].push_back(r);
  }
  if (comparable && by_call.size() > 1) {
    f.kind = Finding::kDesync;
    // The largest set of ranks that agree is taken as right; on a tie, the set with rank 0.
    auto right = by_call.begin();
    for (auto it = by_call.begin(); it != by_call.end(); ++it) {
      if (it->second.size() > right->second.size() ||
          (it->second.size() == right->second.size() && it->second.front() < right->second.front()))
        right = it;
    }
    for (const auto& [call, rs] : by_call) {
      if (call == right->first) continue;
      for (int r : rs) {
        f.culprits[r] = "hung: desynchronised collective: called " + call + " as " +
                        (f.numbered ? "collective " + std::to_string(seq) + " of "
                                    : "the same collective of ") +
                        group_name(g.name) + ", where " + ranks_phrase(right->second) + " called " +
                        right->first;
      }
    }
    f.what = right->first;
    return f;
  }
  f.kind = Finding::kStuck;
  f.age = f.waiters.front().second;
  for (const auto& [r, age] : f.waiters) f.age = std::min(f.age, age);
  if (f.waiters.size() != at_top.size()) return std::nullopt;  // some already finished it
  return f;
}

const char* kStackIndent = "  ";

}  // namespace

std::string verdict_name(HangReport::Verdict v) {
  switch (v) {
    case HangReport::Verdict::kProgressing:
      return "progressing";
    case HangReport::Verdict::kQuiet:
      return "quiet";
    case HangReport::Verdict::kWaiting:
      return "waiting";
    case HangReport::Verdict::kHung:
      return "hung";
  }
  return "?";
}

std::string format_stacks(const ProbeAnswer& a) {
  std::string out;
  for (const auto& t : a.threads) {
    if (t.main) {
      out += "Thread " + t.name + " (main), most recent call last:\n";
      for (const auto& f : t.frames) {
        out += kStackIndent;
        out +=
            "File \"" + f.file + "\", line " + std::to_string(f.line) + ", in " + f.function + "\n";
        if (!f.source.empty()) out += std::string(kStackIndent) + kStackIndent + f.source + "\n";
      }
    }
  }
  for (const auto& t : a.threads) {
    if (t.main) continue;
    out += "Thread " + t.name;
    if (!t.frames.empty()) {
      const auto& f = t.frames.back();
      out += ": " + f.file + ":" + std::to_string(f.line) + " in " + f.function;
    }
    out += "\n";
  }
  return out;
}

HangReport analyse_hang(const std::vector<RankProbe>& ranks, double hang_timeout_s) {
  HangReport report;
  std::map<int, const RankProbe*> by_rank;
  for (const auto& r : ranks) by_rank[r.rank] = &r;

  std::vector<Finding> findings;
  for (const Group& g : groups_of(ranks))
    if (auto f = examine(g)) findings.push_back(std::move(*f));

  std::set<int> waiting_ranks;
  std::map<int, std::set<const Finding*>> waits_in;  // rank -> the findings it waits in
  for (const auto& f : findings) {
    for (const auto& [r, age] : f.waiters) {
      waiting_ranks.insert(r);
      waits_in[r].insert(&f);
      const RankProbe& p = *by_rank.at(r);
      report.waiting.push_back(
          "rank " + std::to_string(r) + " (" + p.host + ", pid " + std::to_string(p.pid) +
          "): waits in " + f.what +
          (f.numbered ? ", collective " + std::to_string(f.seq) + " of " : " on ") +
          group_name(f.group) + ", for " + seconds(age));
    }
    if (f.timeout_s > 0)
      report.group_timeout_s =
          report.group_timeout_s > 0 ? std::min(report.group_timeout_s, f.timeout_s) : f.timeout_s;
  }

  // Findings whose wait has reached the timeout; the culprits that wait for nobody.
  std::map<int, std::string> culprits;
  std::vector<const Finding*> due;
  for (const auto& f : findings) {
    if (f.age >= hang_timeout_s) {
      due.push_back(&f);
      report.hung_for_s = std::max(report.hung_for_s, f.age);
    }
  }
  // A culprit that waits in another group's collective itself is not the root: follow the chain.
  auto waits_elsewhere = [&](int r, const Finding* f) {
    auto it = waits_in.find(r);
    if (it == waits_in.end()) return false;
    for (const Finding* g : it->second)
      if (g != f) return true;
    return false;
  };
  for (const Finding* f : due)
    for (const auto& [r, why] : f->culprits)
      if (!waits_elsewhere(r, f)) culprits.emplace(r, why);
  bool deadlock = false;
  if (culprits.empty()) {
    for (const Finding* f : due) {
      for (const auto& [r, why] : f->culprits) {
        culprits.emplace(r, why + " (it waits itself: a deadlock between groups)");
        deadlock = true;
      }
    }
  }
  std::string summary;
  if (culprits.empty()) {
    for (const Finding* f : due) {
      if (f->kind != Finding::kStuck) continue;
      // Every member is inside it: none is to blame; the lowest rank stands for the group.
      std::vector<int> rs;
      for (const auto& [r, age] : f->waiters) rs.push_back(r);
      const int r = *std::min_element(rs.begin(), rs.end());
      culprits.emplace(r, "hung: every rank of " + group_name(f->group) + " (" + ranks_phrase(rs) +
                              ") has been inside " + f->what +
                              (f->numbered ? ", collective " + std::to_string(f->seq) : "") +
                              ", for " + seconds(f->age) +
                              ", and it does not complete (a network fault between them?)");
      break;
    }
  }

  if (culprits.empty()) {
    // A rank that stopped on its own while others still beat: silent, inside no collective. Not
    // one that others have begun to wait for in a collective: that wait names it once it reaches
    // the timeout, with the collective (the others beat until they entered it, and so look as if
    // they progressed).
    std::set<int> awaited;
    for (const auto& f : findings)
      for (const auto& [r, why] : f.culprits) awaited.insert(r);
    std::vector<int> stalled;
    for (const auto& r : ranks) {
      if (r.silent_s >= hang_timeout_s && r.beaten && !waiting_ranks.count(r.rank) &&
          !awaited.count(r.rank)) {
        bool inside = false;
        if (r.answer) {
          for (const auto& c : r.answer->collectives) inside = inside || !c.done;
          inside = inside || (!r.answer->flight_recorder && !op_from_stack(*r.answer).empty());
        }
        if (!inside) stalled.push_back(r.rank);
      }
    }
    // A process in no group has no collective to tell a quiet phase from a hang. Its beats judge
    // it alone, as they did before hang probes, when they promise to go on in every phase: beats
    // by hand (the worker module's own come only from optimizer steps, heartbeat_line.h), or any
    // beat from a process without PyTorch, whose beats the module cannot make. A rank that beat
    // by hand and does not answer is judged the same: nothing it said shows a group.
    auto judged_by_beats = [](const RankProbe& p) {
      if (!p.answer) return p.beaten_by_hand;
      return p.answer->groups.empty() && (!p.answer->torch || p.beaten_by_hand);
    };
    for (int r : stalled) {
      const RankProbe& p = *by_rank.at(r);
      // The ranks that still beat: within the timeout, and at least half a timeout after this one
      // went silent. Ranks that went quiet together (an evaluation after a step in lockstep) fall
      // silent milliseconds apart, so one probe can find this rank just past the timeout and the
      // others just short of it: that is not "the others still beat".
      std::vector<int> progressing;
      for (const auto& q : ranks)
        if (q.silent_s < hang_timeout_s && q.silent_s + hang_timeout_s / 2 <= p.silent_s)
          progressing.push_back(q.rank);
      if (progressing.empty() && !judged_by_beats(p)) continue;
      report.hung_for_s = std::max(report.hung_for_s, p.silent_s);
      const std::string why =
          !progressing.empty()
              ? " while " + ranks_phrase(progressing) + " still beat, and inside no collective"
          : p.answer ? ", and it uses no collective that could tell a quiet phase from a hang"
                     : " after beating by hand";
      culprits.emplace(
          r,
          "hung: no heartbeat for " + seconds(p.silent_s) + why +
              (p.answer ? ""
                        : " (" + (p.no_answer.empty() ? "it did not answer" : p.no_answer) + ")"));
    }
  }

  if (!culprits.empty()) {
    report.verdict = HangReport::Verdict::kHung;
    for (const auto& [r, why] : culprits) {
      HangCulprit c;
      c.rank = r;
      c.reason = why;
      const RankProbe& p = *by_rank.at(r);
      if (p.answer) c.stack = format_stacks(*p.answer);
      report.culprits.push_back(std::move(c));
    }
    const HangCulprit& root = report.culprits.front();
    const RankProbe& p = *by_rank.at(root.rank);
    report.summary = std::string(deadlock ? "deadlock: " : "") + "rank " +
                     std::to_string(root.rank) + " (" + p.host + ", pid " + std::to_string(p.pid) +
                     ") " + root.reason.substr(root.reason.find(':') + 2);
    return report;
  }
  if (!findings.empty()) {
    report.verdict = HangReport::Verdict::kWaiting;
    double longest = 0;
    for (const auto& f : findings) longest = std::max(longest, f.age);
    report.recheck_s = std::max(0.0, hang_timeout_s - longest);
    report.summary = std::to_string(report.waiting.size()) +
                     " rank(s) waiting in a collective, the longest for " + seconds(longest);
    return report;
  }
  double quiet = 0;
  for (const auto& r : ranks) quiet = std::max(quiet, r.silent_s);
  if (quiet >= hang_timeout_s) {
    report.verdict = HangReport::Verdict::kQuiet;
    report.summary = "no beat for " + seconds(quiet) +
                     ", but no rank is inside a collective (an evaluation or a checkpoint?)";
    return report;
  }
  report.summary = "every rank progresses";
  return report;
}

}  // namespace cohort::launch
