// ShmWorld: the same-host half of a CPU process group, laid out in one shared-memory segment.
//
//   [ShmHeader][ShmRankBlock x local_size][slots: local_size x 2 parities x slot_bytes]
//
// Every local rank owns one control block (its arrival counter `seq`, a futex word, and its pid)
// and two data slots; a collective round writes slots of one parity, so consecutive rounds never
// overwrite data a slower peer is still reading (see shm_allreduce.cc for the argument).
//
// Synchronisation: arrive() bumps this rank's counter; wait_all() waits until every peer's counter
// has reached this rank's, spinning for an adaptive while when every rank has a core of its own,
// then sleeping on the peer's futex in slices of at most kLivenessSlice. Between slices it checks
// that the peer's process still exists (pidfd), so a dead peer is named within about that slice,
// and a live but stuck peer is named at the deadline. abort() marks the segment so every local peer
// fails fast with the same blame.
//
// Thread safety: a ShmWorld is used by one thread at a time (its group's).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/collective.h"
#include "cpu/shm_segment.h"

namespace cohort::detail {

inline constexpr uint64_t kShmMagic = 0x68732d74726f6863ULL;  // "chort-sh"
inline constexpr uint32_t kShmVersion = 1;

struct alignas(64) ShmHeader {
  uint64_t magic;  // written last by the creator
  uint32_t version;
  uint32_t local_size;
  uint64_t slot_bytes;
  uint64_t token;
  int32_t creator_pid;  // written first: sweep_stale_segments() reads it
  std::atomic<uint32_t> registered;
  std::atomic<uint32_t> aborted;
  std::atomic<int32_t> abort_rank;
  char abort_reason[256];
};

struct alignas(64) ShmRankBlock {
  std::atomic<uint32_t> seq;      // arrivals so far (wraps; compared modulo 2^32)
  std::atomic<uint32_t> waiters;  // peers sleeping on seq
  std::atomic<int32_t> pid;
  std::atomic<int32_t> global_rank;
};

class ShmWorld {
 public:
  struct Params {
    std::string name;               // POSIX shm name, "/cohort-..."
    int local_rank = 0;             // this process's index among the host's ranks
    std::vector<int> global_ranks;  // global rank of each local index
    size_t slot_bytes = 0;          // per rank and parity; a multiple of 4096
    uint64_t token = 0;             // the group's random token (checked by openers)
    bool spin = true;               // spin before sleeping (every rank has a core)
  };

  // The creator (local rank 0): creates the segment and initialises the header.
  static std::unique_ptr<ShmWorld> create(const Params& params);
  // Everyone else, once the creator has announced the segment.
  static std::unique_ptr<ShmWorld> open(const Params& params);
  ~ShmWorld();
  ShmWorld(const ShmWorld&) = delete;
  ShmWorld& operator=(const ShmWorld&) = delete;

  // Registers this process and waits until every local rank has (deadline: call.deadline); then
  // the creator unlinks the name and everyone opens the peers' pidfds.
  void join(const Call& call);

  int local_rank() const { return params_.local_rank; }
  int local_size() const { return static_cast<int>(params_.global_ranks.size()); }
  int global_rank(int local) const { return params_.global_ranks[local]; }
  size_t slot_bytes() const { return params_.slot_bytes; }
  const std::string& name() const { return params_.name; }

  // Data slot of local rank `local` for `parity` (0 or 1).
  char* slot(int local, int parity) const;
  // The parity for the next data round (alternates).
  int next_parity() { return static_cast<int>(rounds_++ & 1); }

  // Announces that this rank finished the current phase.
  void arrive();
  // Waits until every local peer has arrived as often as this rank. Throws PeerFailure naming the
  // peer (timeout, its process exited, or an abort by another rank, with that rank's blame).
  void wait_all(const Call& call);
  void barrier(const Call& call) {
    arrive();
    wait_all(call);
  }

  // Marks the segment failed, blaming global rank `blamed` (keeps an earlier blame), and wakes
  // every sleeper. Never throws.
  void abort(int blamed, const std::string& reason) noexcept;
  // True when some local rank aborted; *blamed and *reason say why.
  bool aborted(int* blamed, std::string* reason) const;

  // Names of the shared-memory segment layout's sizes (for tests).
  static size_t segment_bytes(int local_size, size_t slot_bytes);

 private:
  ShmWorld(Params params, ShmSegment segment);
  ShmHeader* header() const;
  ShmRankBlock* block(int local) const;
  void wait_for(int local, uint32_t target, const Call& call);
  bool peer_exited(int local);
  [[noreturn]] void fail_from_abort();

  Params params_;
  ShmSegment segment_;
  uint32_t epoch_ = 0;       // this rank's arrivals
  uint64_t rounds_ = 0;      // data rounds (parity)
  std::vector<int> pidfds_;  // per local rank, -1 for self or when unavailable
  int64_t spin_ns_ = 20000;  // adaptive spin budget (shm_sync.cc)
};

}  // namespace cohort::detail
