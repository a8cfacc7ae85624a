// RoundRelays: this node's store relay of each round (docs/RELAY.md). The round's workers dial the
// relay, on this node, instead of the round's store: the relay carries all their connections to
// the store as channels of one connection, and cohortd serves each channel as it would the worker
// itself. A big job's store then holds one connection per node, not one per rank.
//
// Rounds stay apart as their stores do (rdzv/round_stores.h): a round's relay forwards to that
// round's store only; it listens on a port that no earlier round of the job used (claimed job-wide
// as the stores' ports are), so a worker of an old round that reconnects reaches its own round's
// relay or nothing; and it is closed (listener, every worker connection, its link) with the
// earlier rounds once the next round has formed. When the round's store goes, the relay's link
// goes with it and the relay closes everything at once.
//
// A relay that cannot work with the store (not a cohortd that takes relay links: PyTorch's own,
// an older cohortd; unreachable) is no error: open() says why and the workers dial the store.
//
// Thread safety: thread-safe (opened on the store bridge's thread, read and closed on the loop).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cohort/base/net.h"

namespace cohort::rdzv {
class StoreRelayThread;
}

namespace cohort::launch {

class RoundRelays {
 public:
  RoundRelays();
  ~RoundRelays();
  RoundRelays(const RoundRelays&) = delete;
  RoundRelays& operator=(const RoundRelays&) = delete;

  // True when port `port` may serve a new round (recording that it does); false when an earlier
  // round used it (as RoundStores::Claim).
  using Claim = std::function<bool(int port)>;

  struct Opened {
    std::optional<HostPort> relay;  // where the round's workers dial; empty: the store itself
    std::string why_not;            // when `relay` is empty: why the relay cannot work here
  };
  // Opens round `round`'s relay to `store` (once: opening it again returns the same), its
  // listener on a port that no earlier relay of this object used and that `claim` accepts.
  // Whatever `claim` throws passes through.
  Opened open(int round, const HostPort& store, const Claim& claim);

  // Where round `round`'s workers dial, when a relay of this node serves that round.
  std::optional<HostPort> relay_of(int round) const;

  // Closes the relay of every round before `round`.
  void close_before(int round);

  // The rounds whose relays are open, oldest first (tests, logs).
  std::vector<int> open_rounds() const;

 private:
  mutable std::mutex mu_;
  std::map<int, std::unique_ptr<rdzv::StoreRelayThread>> relays_;  // guarded by mu_
  std::set<int> used_ports_;                                       // guarded by mu_
};

}  // namespace cohort::launch
