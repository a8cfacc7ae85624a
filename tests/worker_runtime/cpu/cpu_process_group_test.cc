// The CPU process group with its ranks as threads of this process, over one MemoryStore: every
// collective against the serial reference in each transport mode (shared memory, TCP, both), and
// the timeout path. The same code runs as real processes over a real store in
// tests/worker_runtime/cpu_group_process_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "../collective_checks.h"
#include "cohort/cpu_process_group.h"
#include "cohort/rdzv/memory_store.h"

namespace cohort {
namespace {

// Runs fn(rank) on `size` threads, joins them, rethrows the first exception.
template <typename Fn>
void run_ranks(int size, Fn fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

struct Config {
  std::string name;
  std::vector<std::string> hosts;  // one host identity per rank
  bool shm = true;
  size_t slot = 4096;
  int64_t small = -1;
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << c.name;
}

class CpuGroupThreads : public ::testing::TestWithParam<Config> {};

TEST_P(CpuGroupThreads, EveryCollectiveMatchesTheSerialReference) {
  const Config& c = GetParam();
  const int size = static_cast<int>(c.hosts.size());
  MemoryStore store;
  std::mutex mu;
  std::vector<std::string> failures;
  run_ranks(size, [&](int rank) {
    ProcessGroupOptions o;
    o.timeout = std::chrono::seconds(60);
    o.use_shared_memory = c.shm;
    o.shm_slot_bytes = c.slot;
    o.small_message_bytes = c.small;
    auto pg = new_cpu_process_group(store, rank, size, o, c.hosts[rank]);
    ASSERT_EQ(pg->rank(), rank);
    ASSERT_EQ(pg->size(), size);
    auto lines = test::check_collectives(*pg);
    std::lock_guard<std::mutex> lock(mu);
    failures.insert(failures.end(), lines.begin(), lines.end());
  });
  for (const auto& l : failures) ADD_FAILURE() << l;
}

std::vector<Config> configs() {
  std::vector<Config> out;
  out.push_back({"single", {"a"}});
  for (int n = 2; n <= 4; ++n) {
    std::vector<std::string> same(n, "a");
    const std::string w = std::to_string(n);
    out.push_back({"shm_w" + w, same});
    out.push_back({"shm_large_path_w" + w, same, true, 4096, 0});
    out.push_back({"shm_small_path_w" + w, same, true, 4096, 1 << 30});
    out.push_back({"shm_default_slot_w" + w, same, true, 0, -1});
    out.push_back({"tcp_w" + w, same, false});
    out.push_back({"tcp_ring_w" + w, same, false, 4096, 0});
  }
  out.push_back({"hier_aab", {"a", "a", "b"}});
  out.push_back({"hier_abb", {"a", "b", "b"}});
  out.push_back({"hier_aabb", {"a", "a", "b", "b"}});
  out.push_back({"hier_abab_ring", {"a", "b", "a", "b"}, true, 4096, 0});
  out.push_back({"hier_aaab", {"a", "a", "a", "b"}});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Modes, CpuGroupThreads, ::testing::ValuesIn(configs()),
                         [](const auto& info) { return info.param.name; });

// One rank never enters the collective (it keeps its group open until the others have failed):
// the others throw CollectiveError naming it, after the timeout and not much later.
class CpuGroupTimeout : public ::testing::TestWithParam<bool> {};

TEST_P(CpuGroupTimeout, SilentPeerIsNamedAtTheDeadline) {
  const bool shm = GetParam();
  constexpr int kSize = 3;
  constexpr int kSilent = 2;
  const auto timeout = std::chrono::milliseconds(400);
  MemoryStore store;
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<int> blamed(kSize, -99);
  std::vector<double> elapsed(kSize, 0);
  run_ranks(kSize, [&](int rank) {
    ProcessGroupOptions o;
    o.timeout = timeout;
    o.use_shared_memory = shm;
    auto pg = new_cpu_process_group(store, rank, kSize, o, "h");
    std::vector<float> v(1000, 1.0f);
    if (rank == kSilent) {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return done == kSize - 1; }));
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      pg->allreduce(std::span<float>(v), ReduceOp::kSum);
      ADD_FAILURE() << "allreduce returned without rank " << kSilent;
    } catch (const CollectiveError& e) {
      blamed[rank] = e.missing_rank();
      elapsed[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(kSilent)), std::string::npos)
          << e.what();
    }
    // The group is unusable afterwards, and says so at once.
    EXPECT_THROW(pg->barrier(), CollectiveError);
    std::lock_guard<std::mutex> lock(mu);
    ++done;
    cv.notify_all();
  });
  for (int r = 0; r < kSize; ++r) {
    if (r == kSilent) continue;
    EXPECT_EQ(blamed[r], kSilent) << "rank " << r;
    EXPECT_GE(elapsed[r], 0.35) << "rank " << r;
    EXPECT_LT(elapsed[r], 5.0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CpuGroupTimeout, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "shm" : "tcp"; });

TEST(CpuGroupSetup, MissingPeerFailsSetupWithItsRank) {
  MemoryStore store;
  ProcessGroupOptions o;
  o.timeout = std::chrono::milliseconds(300);
  try {
    auto pg = new_cpu_process_group(store, 0, 2, o, "h");
    FAIL() << "setup succeeded without rank 1";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.missing_rank(), 1) << e.what();
    EXPECT_NE(std::string(e.what()).find("setup"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 did not join"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort
