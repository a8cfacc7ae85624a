#include "rdzv/round_stores.h"

#include <cerrno>

#include "cohort/error.h"
#include "cohort/rdzv/server.h"

namespace cohort::launch {
namespace {

// Ports a claim may refuse before open() gives up. Each refusal is a port an earlier round of the
// job used; the kernel hands out one of tens of thousands, so more than a few in a row means
// something else is wrong (a claim that refuses everything).
constexpr int kMaxTries = 64;

}  // namespace

RoundStores::RoundStores(std::string listen_host, StoreSecurity security)
    : listen_host_(std::move(listen_host)), security_(std::move(security)) {}

RoundStores::~RoundStores() = default;

int RoundStores::open(int round, const Claim& claim) {
  {
    std::lock_guard lock(mu_);
    if (auto it = stores_.find(round); it != stores_.end()) return it->second->port();
  }
  // Refused ports stay bound until the search ends, so that the kernel cannot offer them again.
  std::vector<std::unique_ptr<rdzv::StoreServerThread>> refused;
  for (int attempt = 0; attempt < kMaxTries; ++attempt) {
    auto server = host_store(listen_host_, 0, security_);
    bool used;
    {
      std::lock_guard lock(mu_);
      used = used_ports_.count(server->port()) > 0;
    }
    // Checked here too, not only through `claim`: the job-wide claims live in the agents' store,
    // and an elastic job whose store moved to a survivor (move_store) has lost them.
    if (used || !claim(server->port())) {
      refused.push_back(std::move(server));
      continue;
    }
    const int port = server->port();
    std::lock_guard lock(mu_);
    used_ports_.insert(port);
    stores_[round] = std::move(server);
    return port;
  }
  throw IoError("cannot open the workers' store of round " + std::to_string(round) + ": " +
                    std::to_string(kMaxTries) + " ports in a row on " + listen_host_ +
                    " had served earlier rounds of this job",
                EADDRINUSE);
}

void RoundStores::close_before(int round) {
  std::map<int, std::unique_ptr<rdzv::StoreServerThread>> closing;
  {
    std::lock_guard lock(mu_);
    auto end = stores_.lower_bound(round);
    closing.insert(std::make_move_iterator(stores_.begin()), std::make_move_iterator(end));
    stores_.erase(stores_.begin(), end);
  }
  // Stopped outside the lock: each joins its thread.
  closing.clear();
}

std::vector<int> RoundStores::open_rounds() const {
  std::lock_guard lock(mu_);
  std::vector<int> rounds;
  for (const auto& [r, s] : stores_) rounds.push_back(r);
  return rounds;
}

}  // namespace cohort::launch
