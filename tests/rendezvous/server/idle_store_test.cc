// cohortd --data-dir holding 400 MB, idle: its loop never pauses for log work (the compaction
// check used to build a whole snapshot every second: pauses of up to 850 ms at this size).
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "../../common/subprocess.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort::rdzv {
namespace {

using namespace std::chrono_literals;
using cohort::testing::Subprocess;

TEST(IdleStore, A400MBDataDirStoreDoesNotPauseItsLoop) {
  char templ[] = "/tmp/cohortd_idle_XXXXXX";
  const std::string dir = ::mkdtemp(templ);
  {
    Subprocess cohortd(
        {COHORTD_BIN, "--host", "127.0.0.1", "--port", "0", "--data-dir", dir, "--fsync", "never"});
    auto address = cohortd.read_line(10s);
    ASSERT_TRUE(address);
    TcpStoreOptions o;
    o.port = std::stoi(address->substr(address->rfind(':') + 1));
    o.timeout = 30s;
    o.connect_timeout = 10s;
    TcpStore s(o);
    const std::string mb(1 << 20, 'x');
    for (int i = 0; i < 400; ++i) s.set(std::string("k").append(std::to_string(i)), mb);
    // Idle for 3.5 s (three compaction checks and more), probed with a small GET every 2 ms.
    s.set("probe", "p");
    long worst_us = 0;
    auto end = std::chrono::steady_clock::now() + 3500ms;
    int probes = 0;
    while (std::chrono::steady_clock::now() < end) {
      auto t0 = std::chrono::steady_clock::now();
      ASSERT_EQ(s.get("probe"), "p");
      worst_us = std::max<long>(worst_us, std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - t0)
                                              .count());
      ++probes;
      std::this_thread::sleep_for(2ms);  // pacing the probe, not waiting for a condition
    }
    std::printf("idle 400 MB store: %d probes, worst %.1f ms\n", probes, worst_us / 1000.0);
    // The target is 50 ms; the bound is generous for a shared machine (a busy one measured
    // 102 ms), far below the 165-850 ms pauses of a snapshot per check (5.5 s here).
    EXPECT_LT(worst_us, 300000);
    cohortd.signal(SIGTERM);
    EXPECT_TRUE(cohortd.wait(20s));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::rdzv
