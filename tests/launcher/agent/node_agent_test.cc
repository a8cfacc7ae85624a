// The whole node-agent lifecycle without processes: NodeAgent over a FakeSpawner, a manual clock
// and an in-process store. Start, exit, failure, restart, hang, stop grace, signals in every
// phase, the restart budget across nodes, and output of a descendant that outlives its worker.
#include "agent/node_agent.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include "../workers/fake_spawner.h"
#include "cohort/base/net.h"
#include "cohort/error.h"
#include "cohort/rdzv/memory_store.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;
using testing::FakeSpawner;

// A folder removed at the end of the test.
struct TempDir {
  TempDir() {
    char templ[] = "/tmp/cohort_node_agent_XXXXXX";
    path = ::mkdtemp(templ);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

// What a node's console received (a regular file: written directly, read back by the test).
struct CapturedConsole {
  CapturedConsole(asio::io_context& io, const std::string& path)
      : fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)),
        file(path),
        out(io, fd),
        err(io, fd) {}
  ~CapturedConsole() { ::close(fd); }
  std::string text() const {
    std::ifstream f(file);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  int fd;
  std::string file;
  ConsoleStream out, err;
};

// Nodes of one job in one process, over one store.
class Cluster {
 public:
  Cluster() : clock(io) {}

  struct Options {
    int nnodes = 1;
    int nproc = 2;
    int max_restarts = 0;
    std::chrono::milliseconds term_timeout = 30s;
    std::chrono::milliseconds hang_timeout = 0ms;
  };

  // Adds node `node_rank` (not started).
  NodeAgent& add_node(int node_rank, const Options& o) {
    LaunchConfig c;
    c.min_nodes = c.max_nodes = o.nnodes;
    c.node_rank = node_rank;
    c.nproc_per_node = std::to_string(o.nproc);
    c.max_restarts = o.max_restarts;
    c.term_timeout = o.term_timeout;
    c.worker_hang_timeout = o.hang_timeout;
    c.master_port = 29500;
    c.master_port_given = true;
    c.rdzv_id = "unit";
    c.log_dir = dir.path + "/logs" + std::to_string(node_rank);
    c.no_python = true;
    c.training_script = "/bin/true";
    EnvMap env{{"PATH", "/usr/bin:/bin"}, {"OMP_NUM_THREADS", "1"}};
    auto node = std::make_unique<Node>();
    node->console =
        std::make_unique<CapturedConsole>(io, dir.path + "/console" + std::to_string(node_rank));
    NodeAgentDeps deps;
    deps.io = &io;
    deps.clock = &clock;
    deps.spawner = &node->spawner;
    deps.store = [this](const std::atomic<bool>* abandon) { return store.connect(abandon); };
    deps.real_process = false;
    deps.out = &node->console->out;
    deps.err = &node->console->err;
    node->agent = std::make_unique<NodeAgent>(make_plan(c, env), env, deps);
    nodes.push_back(std::move(node));
    return *nodes.back()->agent;
  }

  // Runs the loop until `done` holds (false after 10 s of real time).
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io.restart();
      io.run_for(2ms);
    }
    return true;
  }

  // Advances the manual clock and lets what fell due run.
  void advance(std::chrono::milliseconds d) {
    clock.advance(d);
    io.restart();
    io.poll();
  }

  FakeSpawner& spawner(int node) { return nodes.at(static_cast<size_t>(node))->spawner; }
  NodeAgent& agent(int node) { return *nodes.at(static_cast<size_t>(node))->agent; }
  std::string console(int node) { return nodes.at(static_cast<size_t>(node))->console->text(); }

  TempDir dir;
  asio::io_context io;
  ManualLoopClock clock;
  MemoryStore store{std::chrono::seconds(30)};

 private:
  struct Node {
    FakeSpawner spawner;
    std::unique_ptr<CapturedConsole> console;
    std::unique_ptr<NodeAgent> agent;
    ~Node() { agent.reset(); }  // before the spawner and console it uses
  };

 public:
  std::vector<std::unique_ptr<Node>> nodes;
};

TEST(NodeAgent, TwoWorkersSucceedWithTorchrunsRanks) {
  Cluster c;
  NodeAgent& a = c.add_node(0, {});
  a.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2; }));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(c.spawner(0).proc(i).env("RANK"), std::to_string(i));
    EXPECT_EQ(c.spawner(0).proc(i).env("LOCAL_RANK"), std::to_string(i));
    EXPECT_EQ(c.spawner(0).proc(i).env("WORLD_SIZE"), "2");
    EXPECT_EQ(c.spawner(0).proc(i).env("TORCHELASTIC_RESTART_COUNT"), "0");
  }
  c.spawner(0).exit_with(0, 0);
  c.spawner(0).exit_with(1, 0);
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  EXPECT_EQ(a.exit_code(), 0);
}

TEST(NodeAgent, FailureRestartsExactlyMaxRestartsTimesThenNamesTheRootCause) {
  Cluster c;
  Cluster::Options o;
  o.max_restarts = 2;
  NodeAgent& a = c.add_node(0, o);
  a.start();
  for (int attempt = 0; attempt <= 2; ++attempt) {
    const size_t first = static_cast<size_t>(attempt) * 2;
    ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == first + 2; })) << attempt;
    EXPECT_EQ(c.spawner(0).proc(first).env("TORCHELASTIC_RESTART_COUNT"), std::to_string(attempt));
    c.spawner(0).write_stderr(first + 1, "boom in attempt " + std::to_string(attempt) + "\n");
    c.spawner(0).exit_with(first + 1, 3);
    // The healthy worker is stopped with SIGTERM (and ends, having no handler).
    ASSERT_TRUE(c.run_until([&] { return c.spawner(0).proc(first).exited; }));
    EXPECT_EQ(c.spawner(0).proc(first).signals, std::vector<int>{SIGTERM});
  }
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  EXPECT_EQ(a.exit_code(), 1);
  EXPECT_EQ(c.spawner(0).count(), 6u);
  const std::string out = c.console(0);
  ASSERT_NE(out.find("true FAILED"), std::string::npos) << out;
  const std::string summary = out.substr(out.find("true FAILED"));
  EXPECT_NE(summary.find("exited with code 3"), std::string::npos) << summary;
  EXPECT_NE(summary.find("rank      : 1 (local_rank: 1)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("boom in attempt 2"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("boom in attempt 1"), std::string::npos) << summary;
}

TEST(NodeAgent, WorkerThatStopsBeatingIsAskedForItsStackAfterTheTimeout) {
  Cluster c;
  Cluster::Options o;
  o.hang_timeout = 5s;
  NodeAgent& a = c.add_node(0, o);
  a.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2; }));
  c.spawner(0).exit_on_abort = false;  // it writes its stack first, then dies of the signal
  c.spawner(0).beat(0);
  ASSERT_TRUE(c.run_until([&] { return c.clock.next_deadline().has_value(); }));
  c.advance(4900ms);
  EXPECT_TRUE(c.spawner(0).proc(0).signals.empty());  // not yet
  c.advance(200ms);
  ASSERT_TRUE(c.run_until([&] { return !c.spawner(0).proc(0).signals.empty(); }));
  EXPECT_EQ(c.spawner(0).proc(0).signals.front(), SIGABRT);
  c.spawner(0).write_stderr(
      0, "Thread 0x7f (most recent call first):\n  File \"train.py\", line 9 in load\n");
  c.spawner(0).die_of(0, SIGABRT);
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  EXPECT_EQ(a.exit_code(), 1);
  const std::string out = c.console(0);
  const std::string summary = out.substr(out.find("Root Cause"));
  EXPECT_NE(summary.find("hung: no heartbeat for 5 s (its stack, asked for with SIGABRT, below)"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("line 9 in load"), std::string::npos) << summary;
  EXPECT_NE(out.find("<NO_OTHER_FAILURES>"), std::string::npos) << out;  // the stop is no failure
  // Worker 1 never beat: it is not judged.
  EXPECT_EQ(c.spawner(0).proc(1).signals, std::vector<int>{SIGTERM});
}

TEST(NodeAgent, AHungWorkerThatGivesNoStackIsReportedAfterTheGrace) {
  Cluster c;
  Cluster::Options o;
  o.hang_timeout = 5s;
  NodeAgent& a = c.add_node(0, o);
  a.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2; }));
  c.spawner(0).exit_on_abort = false;
  c.spawner(0).beat(0);
  ASSERT_TRUE(c.run_until([&] { return c.clock.next_deadline().has_value(); }));
  c.advance(5100ms);
  ASSERT_TRUE(c.run_until([&] { return !c.spawner(0).proc(0).signals.empty(); }));
  c.advance(3100ms);  // the stack grace
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).running() == 0; }));
  EXPECT_EQ(c.spawner(0).proc(0).signals, (std::vector<int>{SIGABRT, SIGTERM}));
  c.advance(1s);
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  EXPECT_NE(c.console(0).find("(it did not answer SIGABRT with its stack)"), std::string::npos)
      << c.console(0);
}

TEST(NodeAgent, StopGraceEndsInSigkill) {
  Cluster c;
  Cluster::Options o;
  o.term_timeout = 3s;
  NodeAgent& a = c.add_node(0, o);
  a.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2; }));
  c.spawner(0).exit_on_term = false;  // worker 0 ignores SIGTERM
  c.spawner(0).exit_with(1, 1);
  ASSERT_TRUE(c.run_until([&] { return !c.spawner(0).proc(0).signals.empty(); }));
  c.advance(2900ms);
  EXPECT_EQ(c.spawner(0).proc(0).signals, std::vector<int>{SIGTERM});
  c.advance(200ms);
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  EXPECT_EQ(c.spawner(0).proc(0).signals, (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_EQ(a.exit_code(), 1);
}

TEST(NodeAgent, SignalWhileWaitingForTheRendezvousEndsWithinTheAbortGrace) {
  Cluster c;
  Cluster::Options o;
  o.nnodes = 2;  // node 1 never comes
  NodeAgent& a = c.add_node(0, o);
  a.start();
  ASSERT_TRUE(c.run_until([&] { return a.agent().phase() == Agent::Phase::kRendezvous; }));
  a.signal(SIGTERM);
  ASSERT_TRUE(c.run_until([&] { return c.clock.next_deadline().has_value(); }));
  c.advance(1s);
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  EXPECT_EQ(a.exit_code(), 128 + SIGTERM);
  EXPECT_EQ(c.spawner(0).count(), 0u);
  EXPECT_NE(c.console(0).find("the job was stopped: SIGTERM received"), std::string::npos);
}

TEST(NodeAgent, SignalWhileRunningStopsTheWorkersWithIt) {
  Cluster c;
  NodeAgent& a = c.add_node(0, {});
  a.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2; }));
  a.signal(SIGINT);
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).running() == 0; }));
  EXPECT_EQ(c.spawner(0).proc(0).signals, std::vector<int>{SIGINT});
  c.advance(1s);
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  EXPECT_EQ(a.exit_code(), 128 + SIGINT);
}

TEST(NodeAgent, SecondSignalWhileStoppingKillsAtOnce) {
  Cluster c;
  NodeAgent& a = c.add_node(0, {});
  a.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2; }));
  c.spawner(0).exit_on_term = false;
  a.signal(SIGTERM);
  ASSERT_TRUE(c.run_until([&] { return !c.spawner(0).proc(1).signals.empty(); }));
  a.signal(SIGTERM);
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).running() == 0; }));
  EXPECT_EQ(c.spawner(0).proc(1).signals, (std::vector<int>{SIGTERM, SIGKILL}));
  c.advance(1s);
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  EXPECT_EQ(a.exit_code(), 128 + SIGTERM);
}

TEST(NodeAgent, TwoNodesSucceedTogether) {
  Cluster c;
  Cluster::Options o;
  o.nnodes = 2;
  NodeAgent& a0 = c.add_node(0, o);
  NodeAgent& a1 = c.add_node(1, o);
  a0.start();
  a1.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2 && c.spawner(1).count() == 2; }));
  for (int n : {0, 1})
    for (size_t i = 0; i < 2; ++i) c.spawner(n).exit_with(i, 0);
  ASSERT_TRUE(c.run_until([&] { return a0.done() && a1.done(); }));
  EXPECT_EQ(a0.exit_code(), 0);
  EXPECT_EQ(a1.exit_code(), 0);
}

TEST(NodeAgent, TheRestartBudgetIsTheJobsAcrossNodes) {
  Cluster c;
  Cluster::Options o;
  o.nnodes = 2;
  o.nproc = 1;
  o.max_restarts = 1;
  NodeAgent& a0 = c.add_node(0, o);
  NodeAgent& a1 = c.add_node(1, o);
  a0.start();
  a1.start();
  for (size_t attempt = 0; attempt < 2; ++attempt) {
    ASSERT_TRUE(c.run_until([&] {
      return c.spawner(0).count() == attempt + 1 && c.spawner(1).count() == attempt + 1;
    })) << attempt;
    EXPECT_EQ(c.spawner(1).proc(attempt).env("RANK"), "1");
    EXPECT_EQ(c.spawner(0).proc(attempt).env("TORCHELASTIC_RESTART_COUNT"),
              std::to_string(attempt));
    c.spawner(1).exit_with(attempt, 7);  // node 1's worker fails; node 0's is stopped
    ASSERT_TRUE(c.run_until([&] { return c.spawner(0).proc(attempt).exited; }));
    EXPECT_EQ(c.spawner(0).proc(attempt).signals, std::vector<int>{SIGTERM});
  }
  ASSERT_TRUE(c.run_until([&] { return a0.done() && a1.done(); }));
  EXPECT_EQ(a0.exit_code(), 1);
  EXPECT_EQ(a1.exit_code(), 1);
  EXPECT_EQ(c.spawner(0).count(), 2u);  // one restart, on both nodes together
  // Both nodes name node 1's worker as the root cause.
  for (int n : {0, 1}) {
    EXPECT_NE(c.console(n).find("rank      : 1 (local_rank: 0)"), std::string::npos)
        << c.console(n);
    EXPECT_NE(c.console(n).find("exited with code 7"), std::string::npos);
  }
}

TEST(NodeAgent, AWorkerThatCannotStartFailsTheRound) {
  Cluster c;
  NodeAgent& a = c.add_node(0, {});
  c.spawner(0).fail_next_spawn = "exec format error";
  a.start();
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  EXPECT_EQ(a.exit_code(), 1);
  EXPECT_NE(c.console(0).find("could not start: exec format error"), std::string::npos)
      << c.console(0);
}

TEST(NodeAgent, OutputOfADescendantThatOutlivesItsWorkerStaysWithItsRound) {
  Cluster c;
  Cluster::Options o;
  o.nproc = 1;
  o.max_restarts = 1;
  NodeAgent& a = c.add_node(0, o);
  a.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 1; }));
  // The worker dies; a descendant keeps its stderr open (the pipe's write end stays here).
  const int escaped = ::dup(c.spawner(0).proc(0).err_w);
  c.spawner(0).write_stderr(0, "first attempt failed\n");
  c.spawner(0).exit_with(0, 1);
  ASSERT_TRUE(c.run_until([&] { return c.clock.next_deadline().has_value(); }));  // draining
  c.advance(300ms);  // past the drain grace: reported without waiting for the descendant
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2; }));
  // The old descendant keeps writing while the new worker runs and fails (its pipe may be
  // closed by now: EPIPE, not a signal, for this test process).
  ::signal(SIGPIPE, SIG_IGN);
  for (int i = 0; i < 50; ++i) (void)!::write(escaped, "stale line\n", 11);
  c.spawner(0).write_stderr(1, "second attempt failed\n");
  c.spawner(0).exit_with(1, 2);
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  ::close(escaped);
  const std::string out = c.console(0);
  EXPECT_NE(out.find("second attempt failed"), std::string::npos) << out;
  const auto summary = out.substr(out.find("Root Cause"));
  EXPECT_EQ(summary.find("stale line"), std::string::npos) << summary;
}

TEST(NodeAgent, NodesThatDisagreeOnJobWideSettingsAreRefusedOnEveryNode) {
  Cluster c;
  Cluster::Options o;
  o.nnodes = 2;
  o.max_restarts = 1;
  NodeAgent& a0 = c.add_node(0, o);
  o.max_restarts = 3;
  NodeAgent& a1 = c.add_node(1, o);
  a0.start();
  a1.start();
  ASSERT_TRUE(c.run_until([&] { return c.clock.next_deadline().has_value(); }));
  c.advance(1s);
  ASSERT_TRUE(c.run_until([&] { return a0.done() && a1.done(); }));
  EXPECT_EQ(a0.exit_code(), 1);
  EXPECT_EQ(a1.exit_code(), 1);
  for (int n : {0, 1}) {
    EXPECT_NE(c.console(n).find("disagree on --max-restarts: node 0 ("), std::string::npos)
        << c.console(n);
    EXPECT_NE(c.console(n).find("has 1, node 1"), std::string::npos) << c.console(n);
    EXPECT_NE(c.console(n).find("has 3"), std::string::npos) << c.console(n);
  }
  EXPECT_EQ(c.spawner(0).count(), 0u);
}

TEST(NodeAgent, AFinishedNodeBoundsHowLongTheOthersRun) {
  Cluster c;
  Cluster::Options o;
  o.nnodes = 2;
  o.nproc = 1;
  NodeAgent& a0 = c.add_node(0, o);
  NodeAgent& a1 = c.add_node(1, o);
  a0.start();
  a1.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 1 && c.spawner(1).count() == 1; }));
  c.spawner(0).exit_with(0, 0);  // node 0 is done; node 1's worker runs on
  ASSERT_TRUE(c.run_until([&] { return c.clock.next_deadline().has_value(); }));
  c.advance(29s);
  EXPECT_TRUE(c.spawner(1).proc(0).signals.empty());
  c.advance(2s);  // past the exit barrier timeout, the default bound
  ASSERT_TRUE(c.run_until([&] { return c.spawner(1).proc(0).exited; }));
  EXPECT_EQ(c.spawner(1).proc(0).signals, std::vector<int>{SIGTERM});
  c.advance(1s);
  ASSERT_TRUE(c.run_until([&] { return a0.done() && a1.done(); }));
  EXPECT_EQ(a0.exit_code(), 1);
  EXPECT_EQ(a1.exit_code(), 1);
  EXPECT_NE(c.console(1).find("(--wait-after-first-exit)"), std::string::npos) << c.console(1);
}

TEST(NodeAgent, EveryRankThatFailedOnItsOwnIsInTheReport) {
  Cluster c;
  NodeAgent& a = c.add_node(0, {});
  a.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2; }));
  c.spawner(0).exit_on_term = false;
  c.spawner(0).exit_with(1, 3);
  ASSERT_TRUE(c.run_until([&] { return !c.spawner(0).proc(0).signals.empty(); }));
  c.spawner(0).exit_with(0, 4);  // rank 0 failed too, on its own, while being stopped
  ASSERT_TRUE(c.run_until([&] { return a.done(); }));
  const std::string out = c.console(0);
  EXPECT_EQ(out.find("<NO_OTHER_FAILURES>"), std::string::npos) << out;
  EXPECT_NE(out.find("Failures:\n[0]:"), std::string::npos) << out;
  EXPECT_NE(out.find("Root Cause (first observed failure):\n[1]:"), std::string::npos) << out;
}

TEST(NodeAgent, WorkersOfARestartLearnItsReason) {
  Cluster c;
  Cluster::Options o;
  o.max_restarts = 1;
  NodeAgent& a = c.add_node(0, o);
  a.start();
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 2; }));
  EXPECT_EQ(c.spawner(0).proc(0).env("COHORT_RESTART_REASON"), "");
  c.spawner(0).exit_with(1, 3);
  ASSERT_TRUE(c.run_until([&] { return c.spawner(0).count() == 4; }));
  EXPECT_EQ(c.spawner(0).proc(2).env("COHORT_RESTART_REASON"),
            "exited with code 3 (rank 1, local rank 1, host " + cohort::hostname() + ")");
  EXPECT_EQ(c.spawner(0).proc(3).env("COHORT_RESTART_FAILED_RANK"), "1");
}

}  // namespace
}  // namespace cohort::launch
