// The trainer binaries under the real launcher (cohortrun, with the runtime's CPU process group
// between processes): two processes match one with twice the batch, and a worker killed with
// SIGKILL mid-epoch is restarted and the job finishes exactly as an uninterrupted one, repeating
// fewer steps than --checkpoint-every. Skipped when cohortrun or the runtime is not built.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/proc_text.h"
#include "test_util.h"
#include "trainer_fixture.h"

namespace cohort::train {
namespace {
namespace fs = std::filesystem;

const std::string kBin = COHORT_BIN_DIR;

class Launch : public testing::TrainerTest {
 protected:
  void SetUp() override {
#ifndef COHORT_TRAIN_HAVE_RUNTIME
    GTEST_SKIP() << "built without the worker runtime (libcohort)";
#endif
    if (!fs::exists(kBin + "/cohortrun")) GTEST_SKIP() << "no " << kBin << "/cohortrun";
    if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    testing::TrainerTest::SetUp();
  }

  // Starts `args` with stdout and stderr into `log`; returns the pid.
  pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    return pid;
  }
  static int wait_exit(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::vector<std::string> cohortrun(int nproc, const std::vector<std::string>& trainer_args) {
    std::vector<std::string> a = {kBin + "/cohortrun", "--standalone",
                                  "--nproc-per-node",  std::to_string(nproc),
                                  "--max-restarts",    "3",
                                  "--no-python",       kBin + "/cohort-train-fmnist"};
    a.insert(a.end(), {"--data", fmnist_dir()});
    a.insert(a.end(), trainer_args.begin(), trainer_args.end());
    return a;
  }
};

TEST_F(Launch, TwoProcessesMatchOneWithTwiceTheBatch) {
  const auto common =
      std::vector<std::string>{"--train-limit", "1024", "--test-limit", "200", "--max-steps", "6",
                               "--seed",        "5",    "--metrics",    "-"};
  auto two = common, one = common;
  two.insert(two.end(), {"--batch-size", "8", "--checkpoint-dir", path("two")});
  one.insert(one.end(), {"--batch-size", "16", "--checkpoint-dir", path("one")});
  ASSERT_EQ(wait_exit(spawn(cohortrun(2, two), path("two.log"))), 0) << slurp(path("two.log"));
  ASSERT_EQ(wait_exit(spawn(cohortrun(1, one), path("one.log"))), 0) << slurp(path("one.log"));
  EXPECT_TRUE(
      testing::expect_close(final_params(path("two")), final_params(path("one")), 1e-7, 1e-5));
  EXPECT_NE(slurp(path("two.log")).find("2 ranks x batch 8"), std::string::npos)
      << slurp(path("two.log"));
}

// The pid of the worker process with RANK=<rank> whose command line mentions `marker`, or -1.
pid_t find_worker(const std::string& marker, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string c = cohort::testing::proc_text(e.path() / "cmdline");
    if (c.find("cohort-train-fmnist") == std::string::npos || c.find(marker) == std::string::npos ||
        c.find("cohortrun") != std::string::npos) {
      continue;
    }
    const std::string v = cohort::testing::proc_text(e.path() / "environ");
    const std::string want = "RANK=" + std::to_string(rank);
    for (size_t at = 0; at < v.size(); at = v.find('\0', at) + 1) {
      if (v.compare(at, want.size() + 1, want + '\0') == 0) return std::stoi(name);
      if (v.find('\0', at) == std::string::npos) break;
    }
  }
  return -1;
}

// The largest "step" of a training line in a metrics file.
int64_t last_step(const std::string& p) {
  int64_t step = 0;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && !j.contains("eval"))
      step = std::max(step, j.value("step", int64_t{0}));
  }
  return step;
}

TEST_F(Launch, KilledWorkerResumesFromCheckpointAndFinishesLikeAnUninterruptedRun) {
  const int kEvery = 20;
  auto args = [&](const std::string& name) {
    return std::vector<std::string>{"--train-limit",      "12800",
                                    "--test-limit",       "2000",
                                    "--checkpoint-every", std::to_string(kEvery),
                                    "--checkpoint-dir",   path(name),
                                    "--metrics",          path(name + "/metrics.jsonl")};
  };
  fs::create_directories(path("killed"));
  const int ino = ::inotify_init1(IN_CLOEXEC);
  ASSERT_GE(ino, 0);
  ASSERT_GE(::inotify_add_watch(ino, path("killed").c_str(), IN_MODIFY | IN_CREATE), 0);
  const pid_t job = spawn(cohortrun(2, args("killed")), path("killed.log"));

  // Wait (on file events, with a deadline) until rank 0 has logged step 30, then kill rank 1.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  pid_t victim = -1;
  int64_t killed_at = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    killed_at = last_step(path("killed/metrics.jsonl"));
    if (killed_at >= 30) {
      victim = find_worker(path("killed"), 1);
      if (victim > 0) break;
    }
    pollfd p{ino, POLLIN, 0};
    ::poll(&p, 1, 1000);
    char buf[4096];
    if (p.revents & POLLIN) (void)!::read(ino, buf, sizeof buf);
  }
  ::close(ino);
  ASSERT_GT(victim, 0) << "never saw step 30 and rank 1\n" << slurp(path("killed.log"));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(wait_exit(job), 0) << slurp(path("killed.log"));

  // The same job without the kill.
  ASSERT_EQ(wait_exit(spawn(cohortrun(2, args("straight")), path("straight.log"))), 0)
      << slurp(path("straight.log"));

  // Steps logged twice were repeated after the restart: at least one, fewer than kEvery.
  std::map<int64_t, std::vector<double>> losses;
  std::ifstream in(path("killed/metrics.jsonl"));
  double killed_acc = -1;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("eval")) {
      killed_acc = j.at("test_accuracy").get<double>();
    } else {
      losses[j.at("step").get<int64_t>()].push_back(j.at("loss").get<double>());
    }
  }
  int repeated = 0;
  for (const auto& [step, l] : losses) {
    if (l.size() > 1) {
      ++repeated;
      EXPECT_EQ(l[0], l[1]) << "step " << step << " gave another loss the second time";
    }
  }
  EXPECT_GE(repeated, 1) << "no step was repeated: was the worker killed (at step " << killed_at
                         << ")?";
  EXPECT_LT(repeated, kEvery);
  EXPECT_EQ(losses.size(), 100u);  // 12,800 images / (2 ranks x 64)
  std::ifstream sin(path("straight/metrics.jsonl"));
  double straight_acc = -2;
  for (std::string line; std::getline(sin, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("eval")) straight_acc = j.at("test_accuracy").get<double>();
  }
  EXPECT_EQ(killed_acc, straight_acc) << "resumed run ended elsewhere than the uninterrupted one";
  EXPECT_TRUE(
      testing::expect_close(final_params(path("killed")), final_params(path("straight")), 0, 0));
  const std::string log = slurp(path("killed.log"));
  EXPECT_NE(log.find("resumed at step"), std::string::npos) << log;
}

}  // namespace
}  // namespace cohort::train
