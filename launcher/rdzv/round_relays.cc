#include "rdzv/round_relays.h"

#include <cerrno>

#include "cohort/error.h"
#include "cohort/rdzv/relay.h"

namespace cohort::launch {
namespace {

// Ports a claim may refuse before open() gives up, as RoundStores (round_stores.cc).
constexpr int kMaxTries = 64;
// Linking to the round's store, which the round's node rank 0 opened before the round formed:
// one round trip when all is well.
constexpr auto kLinkTimeout = std::chrono::seconds(10);

}  // namespace

RoundRelays::RoundRelays() = default;
RoundRelays::~RoundRelays() = default;

RoundRelays::Opened RoundRelays::open(int round, const HostPort& store, const Claim& claim) {
  {
    std::lock_guard lock(mu_);
    if (auto it = relays_.find(round); it != relays_.end())
      return {HostPort{it->second->host(), it->second->port()}, {}};
  }
  rdzv::StoreRelayOptions o;
  o.store_host = store.host;
  o.store_port = store.port;
  o.connect_timeout = kLinkTimeout;
  // Refused ports stay bound until the search ends, so that the kernel cannot offer them again.
  std::vector<std::unique_ptr<rdzv::StoreRelayThread>> refused;
  for (int attempt = 0; attempt < kMaxTries; ++attempt) {
    std::unique_ptr<rdzv::StoreRelayThread> relay;
    try {
      relay = std::make_unique<rdzv::StoreRelayThread>(o);
    } catch (const rdzv::RelayUnavailable& e) {
      return {std::nullopt, e.what()};
    }
    bool used;
    {
      std::lock_guard lock(mu_);
      used = used_ports_.count(relay->port()) > 0;
    }
    if (used || !claim(relay->port())) {
      refused.push_back(std::move(relay));
      continue;
    }
    HostPort where{relay->host(), relay->port()};
    std::lock_guard lock(mu_);
    used_ports_.insert(relay->port());
    relays_[round] = std::move(relay);
    return {where, {}};
  }
  return {std::nullopt,
          std::to_string(kMaxTries) + " ports in a row had served earlier rounds of this job"};
}

std::optional<HostPort> RoundRelays::relay_of(int round) const {
  std::lock_guard lock(mu_);
  auto it = relays_.find(round);
  if (it == relays_.end()) return std::nullopt;
  return HostPort{it->second->host(), it->second->port()};
}

void RoundRelays::close_before(int round) {
  std::map<int, std::unique_ptr<rdzv::StoreRelayThread>> closing;
  {
    std::lock_guard lock(mu_);
    auto end = relays_.lower_bound(round);
    closing.insert(std::make_move_iterator(relays_.begin()), std::make_move_iterator(end));
    relays_.erase(relays_.begin(), end);
  }
  // Stopped outside the lock: each joins its thread.
  closing.clear();
}

std::vector<int> RoundRelays::open_rounds() const {
  std::lock_guard lock(mu_);
  std::vector<int> rounds;
  for (const auto& [r, relay] : relays_) rounds.push_back(r);
  return rounds;
}

}  // namespace cohort::launch
