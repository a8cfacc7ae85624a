// LivenessMonitor: which of a round's nodes are still alive, seen from this node through the store.
//
// Every running node bumps a counter (rdzv/hb/<node id>) each keep-alive interval and watches the
// others'; a counter that has not moved for the timeout (interval x max attempts), measured on the
// observer's own clock, marks its node lost. Only time the observer could see counts: a gap between
// two of its ticks longer than two intervals (the store was unreachable, or a call hung) is
// forgiven every peer, who could not beat either. On a store with expiring keys (etcd) each node
// also refreshes a key under a lease of that length (rdzv/alive/<id>); a vanished key marks its
// node lost too (the counters usually notice first: etcd's TTLs are whole seconds).
//
// Not thread-safe: one instance per agent, used from the store thread.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/rdzv/store.h"

namespace cohort::launch {

class LivenessMonitor {
 public:
  // `interval`: how often tick() is meant to run. `clock` must outlive the monitor.
  LivenessMonitor(std::string self_id, std::chrono::milliseconds timeout,
                  std::chrono::milliseconds interval, Clock& clock = Clock::steady())
      : self_(std::move(self_id)), timeout_(timeout), interval_(interval), clock_(clock) {}

  // Bumps this node's counter and reads the peers'; returns the ids of peers whose counter has
  // not moved for the timeout. Peers seen for the first time start their clock now.
  std::vector<std::string> tick(Store& store, const std::vector<std::string>& peers);
  // Forgets the observations (a new round).
  void reset() {
    seen_.clear();
    last_tick_.reset();
  }

 private:
  struct Seen {
    int64_t value;            // the peer's counter, last seen
    Clock::time_point since;  // when it last moved
    bool lease_seen = false;  // its leased key existed once (etcd)
  };
  std::string self_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds interval_;
  Clock& clock_;
  std::map<std::string, Seen> seen_;
  std::optional<Clock::time_point> last_tick_;  // the end of the last tick that succeeded
};

}  // namespace cohort::launch
