// Misconfigurations a real cluster meets, caught up front with a line that says what to do: an
// unreachable master, a loopback endpoint that other nodes would never share, flags that the
// elastic rendezvous would silently ignore, another program on the endpoint's port, and jobs on
// one endpoint without --rdzv-id.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/sanitizer.h"
#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

TEST_F(LauncherTest, AnUnreachableMasterIsReportedWithinSeconds) {
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  // A network namespace with nothing but a loopback device: no route to any other address, so
  // nothing can leave it.
  const std::string ns = "cohort-unreach-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(("ip netns add " + ns).c_str()), 0);
  std::vector<std::string> argv{"ip", "netns", "exec", ns};
  for (auto& a : cohortrun({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.99.99.1",
                            "--master-port", "29500"},
                           test_worker({})))
    argv.push_back(a);
  const auto start = std::chrono::steady_clock::now();
  auto r = run(argv, {}, 60s);
  const auto took = std::chrono::steady_clock::now() - start;
  std::system(("ip netns delete " + ns).c_str());
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_LT(took, 15s);
  EXPECT_NE(r.err.find("cannot reach the store at 10.99.99.1:29500"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Network is unreachable"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("check --master-addr"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, AnotherProgramOnTheEndpointIsNamedInsteadOfJoined) {
#ifdef COHORT_TEST_TSAN
  GTEST_SKIP() << "under TSan this cohortrun outlived the test's 120 s once; not yet understood";
#endif
  // A listener that accepts and never answers (a web server waiting for its request line).
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string endpoint = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const auto start = std::chrono::steady_clock::now();
  auto r = run(cohortrun({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                          "--local-addr", "127.0.0.1"},
                         test_worker({})),
               {}, 120s);
  const auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_LT(took, 60s);  // not the 600 s join timeout
  EXPECT_NE(r.err.find("the program listening at " + endpoint +
                       " did not answer a TCPStore PING within 10 s: it is not a TCPStore server"),
            std::string::npos)
      << r.err;
}

TEST_F(LauncherTest, ALoopbackEndpointForSeveralNodesIsRefused) {
  auto r = run(
      cohortrun({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:29400"},
                test_worker({})));
  EXPECT_EQ(r.exit_code(), 2) << r.err;
  EXPECT_NE(r.err.find("is a loopback address, but --nnodes 1:2 lets other nodes join"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--local-addr 127.0.0.1"), std::string::npos);
}

TEST_F(LauncherTest, FlagsTheElasticRendezvousWouldIgnoreAreSaidOrRefused) {
  auto rank = run(cohortrun({"--nnodes", "1:2", "--node-rank", "1", "--rdzv-backend", "c10d",
                             "--rdzv-endpoint", "127.0.0.1:1"},
                            test_worker({})));
  EXPECT_EQ(rank.exit_code(), 2);
  EXPECT_NE(rank.err.find("--node-rank 1 is for the static rendezvous"), std::string::npos)
      << rank.err;
  auto addr = run(cohortrun({"--nnodes", "1", "--master-addr", "10.1.1.1", "--rdzv-backend", "c10d",
                             "--rdzv-endpoint", "localhost:0"},
                            test_worker({})));
  EXPECT_EQ(addr.exit_code(), 0) << addr.err;
  EXPECT_NE(addr.err.find("--master-addr is ignored: with an elastic rendezvous the store is "
                          "--rdzv-endpoint localhost:0"),
            std::string::npos)
      << addr.err;
}

TEST_F(LauncherTest, ElasticJobsWithoutARunIdGetOneFromTheirEntryPoint) {
  auto job = [&](std::vector<std::string> worker) {
    return run(
        cohortrun({"--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0"},
                  std::move(worker)));
  };
  auto id = [](const std::string& err) {
    auto at = err.find("this job's run id is ");
    return at == std::string::npos ? std::string() : err.substr(at + 21, 16);
  };
  // Per-node arguments, and the program named by another path: one job.
  auto a = job(test_worker({"--stderr", "first"}));
  const std::filesystem::path worker(TEST_WORKER_BIN);  // .../bin/cohort_test_worker
  const std::string other_path =
      (worker.parent_path() / ".." / worker.parent_path().filename() / worker.filename())
          .string();  // .../bin/../bin/cohort_test_worker
  auto b = job({"--no-python", other_path, "--out", dir_, "--stderr", "second"});
  ASSERT_EQ(a.exit_code(), 0) << a.err;
  EXPECT_EQ(id(a.err).rfind("job-", 0), 0u) << a.err;
  EXPECT_EQ(id(a.err), id(b.err)) << b.err;
  EXPECT_EQ(worker_env(0, 0)["TORCHELASTIC_RUN_ID"].rfind("job-", 0), 0u);
  // Another program: another job.
  auto c = job({"--no-python", "/bin/true"});
  EXPECT_NE(id(a.err), id(c.err)) << c.err;
}

}  // namespace
}  // namespace cohort::testing
