// Test helper for the healing tests (issue 25): cohortrun jobs of tests/interop/heal_worker.py, an
// ordinary gloo DDP script that rebuilds its process group in every attempt and loses a rank in
// every attempt but the last, so that the job ends 0 only after `restarts` restarts. Every attempt
// is bounded (the worker's --attempt-timeout), and every attempt's group must have formed on
// every rank: a restart that did not heal spends an attempt as the deliberate failures do, so the
// exit status alone would not show it.
//
// COHORT_HEAL_RESTARTS (a compile definition) is how many restarts each job makes: a few in the
// CI binaries, 50 in the "heal" ones.
#pragma once

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "launcher_fixture.h"

#ifndef COHORT_HEAL_RESTARTS
#define COHORT_HEAL_RESTARTS 3
#endif

namespace cohort::testing {

inline constexpr int kHealRestarts = COHORT_HEAL_RESTARTS;
// Seconds each attempt may take to form its group (store and gloo timeouts in the worker).
inline constexpr int kAttemptTimeoutS = 30;

inline const std::string kHealWorker = COHORT_SOURCE_DIR "/tests/interop/heal_worker.py";

// The worker's arguments: lose `dying_rank` in attempts below kHealRestarts; attempts append to
// `log`.
inline std::vector<std::string> heal_worker_args(int dying_rank, const std::string& log) {
  return {kHealWorker,
          "--fail-until",
          std::to_string(kHealRestarts),
          "--dying-rank",
          std::to_string(dying_rank),
          "--attempt-timeout",
          std::to_string(kAttemptTimeoutS),
          "--attempt-log",
          log};
}

// The flags that let a job restart kHealRestarts times.
inline std::vector<std::string> heal_restart_flags() {
  return {"--max-restarts", std::to_string(kHealRestarts)};
}

// How long a whole job may take: every attempt bounded, plus the launcher's work between them.
inline std::chrono::seconds heal_job_limit() {
  return std::chrono::seconds((kHealRestarts + 1) * (kAttemptTimeoutS + 30));
}

// Which ranks formed their group in each attempt, from the worker's --attempt-log lines
// "<attempt> <rank> formed|failed <seconds>".
inline std::map<int, std::set<int>> formed_by_attempt(const std::string& log) {
  std::map<int, std::set<int>> formed;
  std::ifstream f(log);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    int attempt = -1, rank = -1;
    std::string what;
    if (in >> attempt >> rank >> what && what == "formed") formed[attempt].insert(rank);
  }
  return formed;
}

// The attempts (0..kHealRestarts) in which not every one of `world` ranks formed its group, as
// "attempt 3 (ranks formed: 0)"; empty when every restart healed.
inline std::string unhealed_attempts(const std::string& log, int world) {
  auto formed = formed_by_attempt(log);
  std::string bad;
  for (int a = 0; a <= kHealRestarts; ++a) {
    if (static_cast<int>(formed[a].size()) == world) continue;
    std::ostringstream one;
    one << "attempt " << a << " (ranks formed:";
    for (int r : formed[a]) one << ' ' << r;
    if (formed[a].empty()) one << " none";
    one << ") ";
    bad += one.str();
  }
  return bad;
}

// A process whose output goes to files (a job of many attempts writes more than a pipe holds
// while nobody reads it): `<base>.out`, `<base>.err`.
inline std::vector<std::string> to_files(const std::string& base, std::vector<std::string> argv) {
  argv.insert(argv.begin(),
              {"/bin/sh", "-c", "exec \"$0\" \"$@\" >'" + base + ".out' 2>'" + base + ".err'"});
  return argv;
}

// The last `bytes` of a file, for failure messages.
inline std::string tail_of(const std::string& path, size_t bytes = 6000) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

// Runs heal-worker jobs (one cohortrun per node) and checks that every restart healed.
class HealJobTest : public LauncherTest {
 protected:
  void SetUp() override {
    COHORT_REQUIRE_TORCH();
    LauncherTest::SetUp();
    log_ = dir_ + "/attempts";
  }
  void TearDown() override {
    jobs_.clear();
    LauncherTest::TearDown();
  }

  // Starts `prefix` (e.g. "ip netns exec <ns>", or nothing) cohortrun `flags` on the heal worker,
  // `dying_rank` being lost in every attempt but the last; output in <dir>/<name>.{out,err}.
  void start(const std::string& name, std::vector<std::string> flags, int dying_rank,
             std::vector<std::string> prefix = {}, std::vector<std::string> env = {}) {
    std::vector<std::string> argv = prefix;
    argv.push_back(COHORTRUN_BIN);
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (auto& f : heal_restart_flags()) argv.push_back(f);
    for (auto& a : heal_worker_args(dying_rank, log_)) argv.push_back(a);
    env.push_back("PYTHON_EXEC=" + torch_python());
    jobs_.push_back(std::make_unique<Subprocess>(to_files(dir_ + "/" + name, argv), env));
    names_.push_back(name);
  }

  // Waits for every job started: each must end 0, every attempt of `world` ranks must have formed
  // its group, and no worker may have seen an earlier attempt's key. Prints the time taken.
  void expect_every_restart_healed(int world) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < jobs_.size(); ++i) {
      auto st = jobs_[i]->wait(heal_job_limit());
      const std::string base = dir_ + "/" + names_[i];
      ASSERT_TRUE(st) << names_[i] << " did not end within " << heal_job_limit().count() << " s:\n"
                      << tail_of(base + ".err");
      EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << names_[i] << ":\n"
                                                           << tail_of(base + ".err");
      EXPECT_EQ(tail_of(base + ".out", 1 << 20).find("STALE"), std::string::npos)
          << tail_of(base + ".out");
    }
    EXPECT_EQ(unhealed_attempts(log_, world), "") << tail_of(dir_ + "/" + names_[0] + ".err");
    std::printf("%d restart(s) of %d ranks healed; the job took %.1f s\n", kHealRestarts, world,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  std::string log_;  // the workers' --attempt-log
  std::vector<std::unique_ptr<Subprocess>> jobs_;
  std::vector<std::string> names_;
};

}  // namespace cohort::testing
