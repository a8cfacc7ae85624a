#include "cpu/shm_sync.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cohort/error.h"

namespace cohort::detail {
namespace {

// How long a waiter sleeps before checking that the awaited peer still exists.
constexpr auto kLivenessSlice = std::chrono::milliseconds(50);
// Bounds of the adaptive spin before a waiter sleeps (when every local rank has a core).
constexpr int64_t kMinSpinNs = 1000;
constexpr int64_t kMaxSpinNs = 50000;

constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

size_t blocks_offset() {
  return round_up(sizeof(ShmHeader), kPage);
}
size_t slots_offset(int local_size) {
  return blocks_offset() + round_up(sizeof(ShmRankBlock) * local_size, kPage);
}

bool reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

long futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds rel) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(rel.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(rel.count() % 1000000000);
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
                   0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

size_t ShmWorld::segment_bytes(int local_size, size_t slot_bytes) {
  return slots_offset(local_size) + static_cast<size_t>(local_size) * 2 * slot_bytes;
}

ShmWorld::ShmWorld(Params params, ShmSegment segment)
    : params_(std::move(params)), segment_(std::move(segment)) {
  pidfds_.assign(params_.global_ranks.size(), -1);
}

ShmWorld::~ShmWorld() {
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
}

std::unique_ptr<ShmWorld> ShmWorld::create(const Params& params) {
  const int n = static_cast<int>(params.global_ranks.size());
  ShmSegment seg = ShmSegment::create(params.name, segment_bytes(n, params.slot_bytes));
  auto* h = new (seg.data()) ShmHeader{};
  h->creator_pid = ::getpid();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  h->version = kShmVersion;
  h->local_size = static_cast<uint32_t>(n);
  h->slot_bytes = params.slot_bytes;
  h->token = params.token;
  h->abort_rank.store(-1);
  auto* blocks = reinterpret_cast<char*>(seg.data()) + blocks_offset();
  for (int i = 0; i < n; ++i) new (blocks + i * sizeof(ShmRankBlock)) ShmRankBlock{};
  std::atomic_ref<uint64_t>(h->magic).store(kShmMagic, std::memory_order_release);
  return std::unique_ptr<ShmWorld>(new ShmWorld(params, std::move(seg)));
}

std::unique_ptr<ShmWorld> ShmWorld::open(const Params& params) {
  const int n = static_cast<int>(params.global_ranks.size());
  ShmSegment seg = ShmSegment::open(params.name, segment_bytes(n, params.slot_bytes));
  auto* h = static_cast<ShmHeader*>(seg.data());
  if (std::atomic_ref<uint64_t>(h->magic).load(std::memory_order_acquire) != kShmMagic ||
      h->version != kShmVersion || h->local_size != static_cast<uint32_t>(n) ||
      h->slot_bytes != params.slot_bytes || h->token != params.token) {
    throw Error("cohort: shared-memory segment " + params.name +
                " does not belong to this process group (stale or foreign)");
  }
  return std::unique_ptr<ShmWorld>(new ShmWorld(params, std::move(seg)));
}

ShmHeader* ShmWorld::header() const {
  return static_cast<ShmHeader*>(segment_.data());
}

ShmRankBlock* ShmWorld::block(int local) const {
  return reinterpret_cast<ShmRankBlock*>(static_cast<char*>(segment_.data()) + blocks_offset() +
                                         static_cast<size_t>(local) * sizeof(ShmRankBlock));
}

char* ShmWorld::slot(int local, int parity) const {
  return static_cast<char*>(segment_.data()) + slots_offset(local_size()) +
         (static_cast<size_t>(local) * 2 + static_cast<size_t>(parity)) * params_.slot_bytes;
}

void ShmWorld::join(const Call& call) {
  ShmRankBlock* me = block(local_rank());
  me->pid.store(::getpid());
  me->global_rank.store(global_rank(local_rank()));
  header()->registered.fetch_add(1);
  barrier(call);
  // Every local rank has mapped the segment: drop the name, nothing can leak from now on. Every
  // rank does it (idempotent), so the name goes even if the creator died right after arriving.
  segment_.unlink();
  ShmSegment::remove(params_.name);
  for (int q = 0; q < local_size(); ++q) {
    const int pid = block(q)->pid.load();
    if (q == local_rank() || pid == ::getpid()) continue;
    pidfds_[q] = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  }
}

void ShmWorld::arrive() {
  ShmRankBlock* me = block(local_rank());
  me->seq.store(++epoch_, std::memory_order_seq_cst);
  if (me->waiters.load(std::memory_order_seq_cst) != 0) futex_wake(&me->seq);
}

void ShmWorld::wait_all(const Call& call) {
  const int n = local_size();
  for (int q = 0; q < n; ++q) {
    if (q != local_rank()) wait_for(q, epoch_, call);
  }
}

bool ShmWorld::peer_exited(int local) {
  const int fd = pidfds_[local];
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  const int pid = block(local)->pid.load();
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

void ShmWorld::wait_for(int q, uint32_t target, const Call& call) {
  std::atomic<uint32_t>& seq = block(q)->seq;
  if (reached(seq.load(std::memory_order_acquire), target)) return;
  ShmHeader* h = header();
  // Spin while that tends to pay off, then sleep on the peer's futex. Not sched_yield(): on a busy
  // machine a yielding rank stays runnable behind other processes until the next tick, while a
  // futex sleeper is woken (and preempts) the moment its peer arrives. The spin budget adapts: it
  // doubles when a spin succeeds and halves when it fails, so ranks that share a core with each
  // other (or with other work) stop burning it.
  if (params_.spin) {
    const auto spin_until = Clock::now() + std::chrono::nanoseconds(spin_ns_);
    for (;;) {
      for (int i = 0; i < 32; ++i) {
        if (reached(seq.load(std::memory_order_acquire), target)) {
          spin_ns_ = std::min<int64_t>(spin_ns_ * 2, kMaxSpinNs);
          return;
        }
        cpu_relax();
      }
      if (h->aborted.load(std::memory_order_relaxed) != 0) fail_from_abort();
      if (Clock::now() >= spin_until) break;
    }
    spin_ns_ = std::max<int64_t>(spin_ns_ / 2, kMinSpinNs);
  }
  std::atomic<uint32_t>& waiters = block(q)->waiters;
  for (;;) {
    if (h->aborted.load(std::memory_order_acquire) != 0) fail_from_abort();
    const auto now = Clock::now();
    if (now >= call.deadline) {
      throw PeerFailure(global_rank(q), true,
                        "rank " + std::to_string(global_rank(q)) +
                            " did not arrive within the timeout (" +
                            seconds(call.deadline - call.start) + ", same-host peer, pid " +
                            std::to_string(block(q)->pid.load()) + ")");
    }
    const auto slice = std::min<Clock::duration>(call.deadline - now, kLivenessSlice);
    waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = seq.load(std::memory_order_seq_cst);
    long rc = 0;
    int err = 0;
    if (!reached(v, target) && h->aborted.load(std::memory_order_seq_cst) == 0) {
      rc = futex_wait(&seq, v, std::chrono::duration_cast<std::chrono::nanoseconds>(slice));
      err = errno;
    }
    waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(seq.load(std::memory_order_acquire), target)) return;
    if (rc != 0 && err == ETIMEDOUT && peer_exited(q)) {
      throw PeerFailure(global_rank(q), false,
                        "rank " + std::to_string(global_rank(q)) + " (pid " +
                            std::to_string(block(q)->pid.load()) + ", same host) exited");
    }
  }
}

void ShmWorld::abort(int blamed, const std::string& reason) noexcept {
  ShmHeader* h = header();
  int32_t none = -1;
  if (h->abort_rank.compare_exchange_strong(none, blamed == -1 ? -2 : blamed)) {
    const size_t n = std::min(reason.size(), sizeof(h->abort_reason) - 1);
    std::memcpy(h->abort_reason, reason.data(), n);
    h->abort_reason[n] = '\0';
  }
  h->aborted.store(1, std::memory_order_seq_cst);
  for (int q = 0; q < local_size(); ++q) futex_wake(&block(q)->seq);
}

bool ShmWorld::aborted(int* blamed, std::string* reason) const {
  ShmHeader* h = header();
  if (h->aborted.load(std::memory_order_acquire) == 0) return false;
  const int32_t b = h->abort_rank.load();
  if (blamed != nullptr) *blamed = b < 0 ? -1 : b;
  if (reason != nullptr) {
    *reason = std::string(h->abort_reason, strnlen(h->abort_reason, sizeof(h->abort_reason)));
  }
  return true;
}

void ShmWorld::fail_from_abort() {
  int blamed = -1;
  std::string reason;
  aborted(&blamed, &reason);
  throw PeerFailure(blamed, false, reason.empty() ? "a same-host peer aborted" : reason);
}

}  // namespace cohort::detail
