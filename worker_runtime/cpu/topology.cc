#include "cpu/topology.h"

#include <algorithm>
#include <map>

namespace cohort::detail {

Topology Topology::build(int rank, const std::vector<std::string>& host_ids,
                         bool use_shared_memory) {
  Topology t;
  t.rank = rank;
  t.size = static_cast<int>(host_ids.size());
  std::map<std::string, int> index_of;
  for (int r = 0; r < t.size; ++r) {
    const std::string key = use_shared_memory ? host_ids[r] : std::to_string(r);
    auto [it, fresh] = index_of.emplace(key, static_cast<int>(t.hosts.size()));
    if (fresh) t.hosts.emplace_back();
    t.hosts[it->second].push_back(r);
    if (r == rank) {
      t.host = it->second;
      t.local = static_cast<int>(t.hosts[it->second].size()) - 1;
    }
  }
  t.columns = t.size;
  for (const auto& h : t.hosts) t.columns = std::min(t.columns, static_cast<int>(h.size()));
  if (t.size == 1) {
    t.mode = Mode::kSingle;
  } else if (t.hosts.size() == 1) {
    t.mode = Mode::kShm;
  } else if (static_cast<int>(t.hosts.size()) == t.size) {
    t.mode = Mode::kTcp;
  } else {
    t.mode = Mode::kHierarchical;
  }
  return t;
}

std::vector<int> Topology::column(int j) const {
  std::vector<int> out;
  out.reserve(hosts.size());
  for (const auto& h : hosts) out.push_back(h[j]);
  return out;
}

const char* mode_name(Topology::Mode mode) {
  switch (mode) {
    case Topology::Mode::kSingle:
      return "single";
    case Topology::Mode::kShm:
      return "shared-memory";
    case Topology::Mode::kTcp:
      return "tcp";
    case Topology::Mode::kHierarchical:
      return "shared-memory+tcp";
  }
  return "?";
}

}  // namespace cohort::detail
