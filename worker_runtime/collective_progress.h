// CollectiveProgress: what each process group of this process is doing, for cohortrun's hang
// probes (probe_server.h): how many collectives it issued, the one in progress and since when,
// and the last one it finished. cohortrun compares these numbers across ranks to name the rank
// that never entered the collective the others wait in (cohort/base/hang_probe.h).
//
// A group owns one GroupProgress for its life; its collectives call enter() and leave() (a few
// atomic stores: no lock, no allocation, no system call). The probe server's thread reads every
// group's through snapshot(), consistent per group (a sequence lock).
//
// Thread safety: enter()/leave() from the group's one thread at a time; snapshot() from any.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cohort/base/hang_probe.h"
#include "cohort/types.h"

namespace cohort::detail {

class GroupProgress {
 public:
  // Registers the group ("cohort" for a context's group, "cohort/<k>" for its subgroups) and,
  // the first time in the process, starts the probe server when cohortrun gave this worker a
  // control socket.
  GroupProgress(std::string name, std::string backend, std::vector<int> global_ranks);
  ~GroupProgress();
  GroupProgress(const GroupProgress&) = delete;
  GroupProgress& operator=(const GroupProgress&) = delete;

  // Collective `op` (a string literal) of `count` elements of `dtype` starts / has ended.
  void enter(const char* op, DataType dtype, size_t count);
  void leave();

  // This group's line of an answer: the group, and its collective in progress and last
  // finished one, when there are.
  void snapshot(hang_probe::GroupProgress* group,
                std::vector<hang_probe::CollectiveEntry>* collectives) const;

 private:
  const std::string name_;
  const std::string backend_;
  const std::vector<int> global_ranks_;
  // Written by the group's thread; odd while it writes.
  std::atomic<uint64_t> version_{0};
  std::atomic<int64_t> issued_{0};
  std::atomic<bool> in_progress_{false};
  std::atomic<const char*> op_{""};
  std::atomic<int> dtype_{0};
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> since_ns_{0};  // wall clock, when the collective in progress started
  std::atomic<const char*> last_op_{""};
  std::atomic<int64_t> last_ns_{0};  // when the last finished one started
};

// Every registered group's snapshot, in registration order.
void snapshot_all_groups(std::vector<hang_probe::GroupProgress>* groups,
                         std::vector<hang_probe::CollectiveEntry>* collectives);

}  // namespace cohort::detail
