// TcpMesh: a TCP connection between every two members of a set of ranks, set up through the store
// (gloo's connectFullMesh): each member listens on an ephemeral port of its address, publishes
// "host:port" under the group's key prefix, connects to every member before it and accepts every
// member after it. A connection opens with a hello (magic, the group's random token, the sender's
// index), so a stray or stale connection is refused rather than mistaken for a peer.
//
// Thread safety: used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/rdzv/store.h"
#include "cpu/collective.h"
#include "cpu/tcp_pair.h"

namespace cohort::detail {

class TcpMesh {
 public:
  // Connects `members` (global ranks, in mesh order; this process is members[index]). Throws
  // cohort::Error (or PeerFailure naming the member that never showed up) by call.deadline.
  static std::unique_ptr<TcpMesh> connect(Store& store, const std::string& key_prefix,
                                          std::vector<int> members, int index,
                                          const std::string& listen_host, uint64_t token,
                                          const Call& call);

  int size() const { return static_cast<int>(members_.size()); }
  int index() const { return index_; }
  int global_rank(int i) const { return members_[i]; }
  // The connection to member i; null for this process's own index.
  TcpPair* pair(int i) const { return pairs_[i].get(); }
  // Shuts every connection down so blocked peers see EOF now.
  void shutdown_all() noexcept;

 private:
  TcpMesh(std::vector<int> members, int index);
  std::vector<int> members_;
  int index_;
  std::vector<std::unique_ptr<TcpPair>> pairs_;
};

}  // namespace cohort::detail
