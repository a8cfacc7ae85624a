#include "rdzv/dynamic_protocol.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cohort/base/duration_text.h"
#include "cohort/base/json_number.h"
#include "cohort/base/parse.h"
#include "cohort/error.h"
#include "failure/json_text.h"
#include "rdzv/round_ops.h"
#include "rdzv/store_keys.h"

namespace cohort::launch {
namespace {

using nlohmann::json;

struct RoundState {
  int version = 0;
  bool complete = false;
  std::vector<std::string> participants;  // join order
  std::string text;                       // as stored ("" when absent)
};

std::string encode(const RoundState& s) {
  return json_text(json{{"version", s.version},
                        {"status", s.complete ? "complete" : "joining"},
                        {"participants", s.participants}});
}

RoundState decode(const std::string& text) {
  RoundState s;
  s.text = text;
  if (text.empty()) return s;
  try {
    json j = json::parse(text);
    s.version = json_number::required<int>(j, "version");
    s.complete = j.at("status").get<std::string>() == "complete";
    s.participants = j.at("participants").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    throw ProtocolError(std::string("malformed rendezvous state in the store: ") + e.what());
  }
  return s;
}

RoundState load(Store& store, int round) {
  std::vector<std::string> k{keys::round_state(round)};
  if (!store.check(k)) return {};
  return decode(store.get(k[0]));
}

// Replaces `old` with `next` (version bumped); false when someone else changed it first.
bool update(Store& store, int round, const RoundState& old, RoundState next) {
  next.version = old.version + 1;
  std::string text = encode(next);
  if (store.compare_set(keys::round_state(round), old.text, text) != text) return false;
  // Acknowledged (a compare_set has a reply, a SET none): a store that dies right after the
  // state change still gets this wake-up, from our retry once it is back.
  store.compare_set(keys::round_changed(round, next.version), "", "1");
  return true;
}

int current_round(Store& store) {
  std::string v = store.compare_set(keys::current_round(), "", "0");
  auto round = parse_int(v, 0, std::numeric_limits<int>::max());
  if (!round) throw ProtocolError("malformed rdzv/current '" + v + "' in the store");
  return *round;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::chrono::milliseconds left(const Clock& clock, Clock::time_point deadline) {
  auto l = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock.now());
  return std::max(l, std::chrono::milliseconds(1));
}

// Waits for `key` until `deadline`; false on timeout.
bool wait_key(Store& store, const Clock& clock, const std::string& key,
              Clock::time_point deadline) {
  std::vector<std::string> k{key};
  try {
    store.wait(k, left(clock, deadline));
    return true;
  } catch (const StoreTimeoutError&) {
    return false;
  }
}

}  // namespace

RankAssignment DynamicProtocol::join(Store& store, int after_round, NodeInfo self,
                                     const RankKnown& on_rank_known) {
  const auto join_deadline = clock_.now() + settings_.join_timeout;
  bool saw_min = false;
  Clock::time_point min_seen;  // when this node first saw MIN participants
  for (;;) {
    if (clock_.now() >= join_deadline) {
      throw StoreTimeoutError("rendezvous timed out after " + in_seconds(settings_.join_timeout) +
                                  ": fewer than " + std::to_string(settings_.min_nodes) +
                                  " nodes joined (--nnodes " + std::to_string(settings_.min_nodes) +
                                  ":" + std::to_string(settings_.max_nodes) + ")",
                              "", store.describe());
    }
    int round = current_round(store);
    if (round <= after_round) {
      // Our last round has ended but nobody has moved the job on yet: do it.
      store.compare_set(keys::current_round(), std::to_string(round),
                        std::to_string(after_round + 1));
      continue;
    }
    if (round_ops::outcome_of(store, round)) {
      store.compare_set(keys::current_round(), std::to_string(round), std::to_string(round + 1));
      saw_min = false;
      continue;
    }
    RoundState st = load(store, round);
    const bool member = contains(st.participants, self.id);
    const int n = static_cast<int>(st.participants.size());

    if (st.complete) {
      if (member) {
        std::vector<std::string> sorted = st.participants;
        std::sort(sorted.begin(), sorted.end());
        self.node_rank =
            static_cast<int>(std::find(sorted.begin(), sorted.end(), self.id) - sorted.begin());
        if (on_rank_known) on_rank_known(round, self.node_rank, &self);
        int restarts = round_ops::restarts_after(store, round - 1);
        auto nodes =
            round_ops::exchange_node_info(store, round, self, n, settings_.node_info_timeout);
        check_same_settings(nodes);
        return assign_ranks(nodes, self.node_rank, round, restarts);
      }
      if (n < settings_.max_nodes) {
        // Room for us: end the running round so that everybody re-forms with us.
        Outcome o;
        o.kind = Outcome::kRescale;
        o.restarts = round_ops::restarts_after(store, round - 1);
        o.detail = "node " + self.id + " is waiting to join";
        round_ops::publish_outcome(store, round, o);
        continue;
      }
      // A full round: wait for it to end.
      wait_key(store, clock_, keys::outcome(round), join_deadline);
      continue;
    }

    if (!member) {
      if (n >= settings_.max_nodes) {  // cannot happen (MAX completes a round); be safe
        wait_key(store, clock_, keys::round_changed(round, st.version + 1), join_deadline);
        continue;
      }
      RoundState next = st;
      next.participants.push_back(self.id);
      next.complete = n + 1 >= settings_.max_nodes;
      update(store, round, st, next);  // on a conflict the loop reads again
      continue;
    }

    // A member of a joining round: complete it once the last call is over, else wait for news.
    auto wake_at = join_deadline;
    if (n >= settings_.min_nodes) {
      if (!saw_min) {
        saw_min = true;
        min_seen = clock_.now();
      }
      auto last_call_end = min_seen + settings_.last_call_timeout;
      if (clock_.now() >= last_call_end) {
        RoundState next = st;
        next.complete = true;
        update(store, round, st, next);
        continue;
      }
      wake_at = std::min(wake_at, last_call_end);
    }
    wait_key(store, clock_, keys::round_changed(round, st.version + 1), wake_at);
  }
}

}  // namespace cohort::launch
