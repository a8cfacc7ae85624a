// TcpPair: one TCP connection to a peer, the cross-host transport of the CPU process group, and
// run_transfers(), the poll loop that moves bytes on several pairs at once until every transfer is
// done or the collective's deadline passes.
//
// Algorithms describe a step as a list of Transfers (send these bytes to that peer, receive those
// from another) and hand it to run_transfers; they never touch sockets. A receive may report its
// progress (so a ring reduces a block while the rest is still arriving) and a send may be limited
// by a counter another transfer advances (so a chain broadcast forwards bytes as they come in).
//
// Failures: EOF, a reset or any socket error on a pair throws PeerFailure naming that peer; the
// deadline throws PeerFailure naming the peer of the first unfinished transfer.
//
// Thread safety: a pair is used by one thread at a time.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "cpu/collective.h"

namespace cohort::detail {

class TcpPair {
 public:
  // Takes ownership of the connected socket `fd` (made non-blocking here).
  TcpPair(int fd, int peer_rank);
  ~TcpPair();
  TcpPair(const TcpPair&) = delete;
  TcpPair& operator=(const TcpPair&) = delete;

  int fd() const { return fd_; }
  int peer_rank() const { return peer_rank_; }
  // Shuts both directions down, so the peer sees EOF at once (used after a failure).
  void shutdown() noexcept;

 private:
  int fd_;
  int peer_rank_;
};

struct Transfer {
  TcpPair* pair = nullptr;
  bool send = false;
  char* data = nullptr;  // const for sends
  size_t bytes = 0;
  size_t done = 0;  // progress; run_transfers advances it
  // Sends only: when set, never send beyond *available bytes (another transfer advances it).
  const size_t* available = nullptr;
  // Receives only: called with [from, to) each time the received prefix grows by at least
  // `granule` bytes, and once at the end.
  size_t granule = 0;
  std::function<void(size_t from, size_t to)> on_progress;
  size_t reported = 0;
};

// Runs every transfer to completion. Throws PeerFailure (see the file comment).
void run_transfers(std::span<Transfer> transfers, const Call& call);

// Convenience for one transfer each way (either may be null).
void exchange(TcpPair* to, const void* send, size_t send_bytes, TcpPair* from, void* recv,
              size_t recv_bytes, const Call& call);

}  // namespace cohort::detail
