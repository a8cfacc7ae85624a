// libcohort against real PyTorch 1.13 (COHORT_TORCH_PYTHON): the sampler's index lists on a
// Fashion-MNIST-sized dataset, and a worker group started by torchrun itself (its agent hosts the
// 1.13 TCPStore the Context connects to).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../common/free_port.h"
#include "../common/torch_python.h"
#include "cohort/sampler.h"
#include "process_harness.h"

namespace cohort {
namespace {

using cohort::testing::free_port;
using cohort::testing::torch_bin_dir;
using cohort::testing::torch_python;

// Live comparison with /usr/bin/python3's torch for a full Fashion-MNIST-sized epoch.
TEST(DistributedSamplerInterop, MatchesLivePyTorchOnLargeDatasets) {
  const char* script =
      "import sys\n"
      "from torch.utils.data import DistributedSampler as D\n"
      "s = D(range(60000), num_replicas=3, rank=2, shuffle=True, seed=2024)\n"
      "s.set_epoch(11)\n"
      "sys.stdout.write(' '.join(map(str, s)))\n";
  COHORT_REQUIRE_TORCH();
  const std::string cmd = torch_python() + " -c \"" + script + "\" 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  ASSERT_TRUE(p);
  std::vector<size_t> want;
  unsigned long v;
  while (std::fscanf(p.get(), "%lu", &v) == 1) want.push_back(v);
  ASSERT_FALSE(want.empty()) << torch_python() << " printed no indices";
  DistributedSampler s(60000, 3, 2, true, 2024);
  s.set_epoch(11);
  EXPECT_EQ(s.indices(), want);
}

// torchrun --nproc_per_node=2 --no_python runtime_test_worker collectives: the Context parses
// torchrun's environment and reaches the agent's store in its generation's dialect (1.13's, or
// the VALIDATE-era one of 2.x's libuv store).
TEST(TorchrunInterop, WorkerGroupUnderTorchrun) {
  COHORT_REQUIRE_TORCH();
  const std::string torchrun = torch_bin_dir() + "/torchrun";
  if (::access(torchrun.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << torchrun;
  test::TempDir dir;
  test::Child c = test::spawn(
      // -r 1 -t 1: Debian's torchrun 1.13 on Python 3.11 crashes with the default -r 0
      // (docs/TORCHRUN.md §3.1).
      {torchrun, "--nproc_per_node=2", "--no_python", "--redirects=1", "--tee=1",
       "--log_dir=" + dir.path() + "/logs", "--master_port=" + std::to_string(free_port()),
       COHORT_TEST_WORKER, "collectives"},
      {{"COHORT_STORE_DIALECT", cohort::testing::torch_is_1x() ? "torch113" : "current"},
       {"COHORT_TIMEOUT_S", "60"},
       {"OMP_NUM_THREADS", "1"}},
      dir.path(), "torchrun");
  ASSERT_TRUE(test::wait_child(c, std::chrono::steady_clock::now() + std::chrono::seconds(120)))
      << c.stderr_text();
  EXPECT_TRUE(c.exited_with(0)) << c.stdout_text() << c.stderr_text();
  const std::string out = c.stdout_text();
  EXPECT_NE(out.find("OK rank 0"), std::string::npos) << out << c.stderr_text();
  EXPECT_NE(out.find("OK rank 1"), std::string::npos) << out;
}

}  // namespace
}  // namespace cohort
