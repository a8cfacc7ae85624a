// Topology: how a CPU process group's ranks sit on hosts, and therefore which transport each
// collective uses. Pure: built from the host identity every rank published in the store.
//
// Ranks with the same host identity share memory. The mode follows:
//   kSingle        one rank;
//   kShm           one host: everything through the shared-memory segment;
//   kTcp           one rank per host: everything over TCP;
//   kHierarchical  several hosts, some with several ranks: allreduce reduces on each host through
//                  shared memory, each "column" (the ranks with the same local index, one per host,
//                  for the first `columns` local indices) allreduces its slice over TCP, and the
//                  host shares the result through shared memory again; the other collectives are
//                  built on that allreduce.
//
// Thread safety: a value type.
#pragma once

#include <string>
#include <vector>

namespace cohort::detail {

struct Topology {
  enum class Mode { kSingle, kShm, kTcp, kHierarchical };

  int rank = 0;
  int size = 1;
  std::vector<std::vector<int>> hosts;  // global ranks of each host, ascending; hosts ordered by
                                        // their lowest rank
  int host = 0;                         // this rank's host index
  int local = 0;                        // this rank's index on its host
  int columns = 1;                      // the smallest number of ranks on any host
  Mode mode = Mode::kSingle;

  // host_ids[r] is rank r's host identity. With use_shared_memory false every rank is treated as
  // a host of its own.
  static Topology build(int rank, const std::vector<std::string>& host_ids, bool use_shared_memory);

  int local_size() const { return static_cast<int>(hosts[host].size()); }
  // Global ranks with local index j, one per host, in host order. REQUIRES: j < columns.
  std::vector<int> column(int j) const;
};

const char* mode_name(Topology::Mode mode);

}  // namespace cohort::detail
