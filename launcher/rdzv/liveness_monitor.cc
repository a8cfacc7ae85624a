#include "rdzv/liveness_monitor.h"

#include "rdzv/store_keys.h"

namespace cohort::launch {

std::vector<std::string> LivenessMonitor::tick(Store& store,
                                               const std::vector<std::string>& peers) {
  std::vector<std::string> lost;
  const bool leased = store.supports_ttl();
  if (leased) store.set_with_ttl(keys::alive(self_), "1", timeout_);
  store.add(keys::keep_alive(self_), 1);
  std::map<std::string, int64_t> counters;
  for (const auto& p : peers)
    if (p != self_) counters[p] = store.add(keys::keep_alive(p), 0);
  // Read after the calls, which may have waited for a store that came back.
  const auto now = clock_.now();
  if (last_tick_ && now - *last_tick_ > 2 * interval_) {
    const auto blind = now - *last_tick_ - interval_;
    for (auto& [id, seen] : seen_) seen.since += blind;
  }
  last_tick_ = now;
  for (const auto& p : peers) {
    if (p == self_) continue;
    const int64_t v = counters[p];
    auto it = seen_.find(p);
    if (it == seen_.end() || it->second.value != v) {
      const bool lease_seen = it != seen_.end() && it->second.lease_seen;
      it = seen_.insert_or_assign(p, Seen{v, now, lease_seen}).first;
    } else if (now - it->second.since >= timeout_) {
      lost.push_back(p);
      continue;
    }
    if (leased) {
      std::vector<std::string> k{keys::alive(p)};
      if (store.check(k)) {
        it->second.lease_seen = true;
      } else if (it->second.lease_seen) {
        lost.push_back(p);  // its lease expired
      }
    }
  }
  return lost;
}

}  // namespace cohort::launch
