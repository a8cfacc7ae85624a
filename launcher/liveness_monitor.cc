#include "liveness_monitor.h"

namespace cohort::launch {

std::string keep_alive_key(const std::string& node_id) {
  return "rdzv/hb/" + node_id;
}
std::string alive_key(const std::string& node_id) {
  return "rdzv/alive/" + node_id;
}

std::vector<std::string> LivenessMonitor::tick(Store& store,
                                               const std::vector<std::string>& peers) {
  const auto now = clock_.now();
  std::vector<std::string> lost;
  const bool leased = store.supports_ttl();
  if (leased) store.set_with_ttl(alive_key(self_), "1", timeout_);
  store.add(keep_alive_key(self_), 1);
  for (const auto& p : peers) {
    if (p == self_) continue;
    const int64_t v = store.add(keep_alive_key(p), 0);
    auto it = seen_.find(p);
    if (it == seen_.end() || it->second.value != v) {
      const bool lease_seen = it != seen_.end() && it->second.lease_seen;
      it = seen_.insert_or_assign(p, Seen{v, now, lease_seen}).first;
    } else if (now - it->second.since >= timeout_) {
      lost.push_back(p);
      continue;
    }
    if (leased) {
      std::vector<std::string> k{alive_key(p)};
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
