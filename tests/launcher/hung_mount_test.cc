// A worker's error file on a file system that never answers (a dead NFS server, a FUSE daemon
// that stopped answering) holds neither cohortrun's summary nor its exit (issue 27). The mount is
// real: cohort_hung_fuse (hung_fuse.cc) serves FUSE and answers nothing after its handshake.
#include <sys/stat.h>

#include <regex>

#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

// The time (s since cohort_hung_fuse started) on its first line matching `pattern` (one group).
std::optional<double> time_of(const std::string& err, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(pattern))) return std::nullopt;
  return std::stod(m[1]);
}

TEST_F(LauncherTest, AnErrorFileOnAHungMountHoldsNeitherTheSummaryNorTheExit) {
  const std::string mount = dir_ + "/hung";
  ASSERT_EQ(::mkdir(mount.c_str(), 0755), 0);
  // The worker puts its error file on the mount (its folder becomes a link there) and dies.
  const std::string worker =
      "d=$(dirname \"$TORCHELASTIC_ERROR_FILE\") && rm -rf \"$d\" && ln -s \"$HUNG_MOUNT\" \"$d\" "
      "&& exit 3";
  const std::vector<std::string> argv{HUNG_FUSE_BIN, mount,
                                      "30",          "--",
                                      COHORTRUN_BIN, "--nproc-per-node",
                                      "1",           "--max-restarts",
                                      "0",           "--rdzv-id",
                                      "hung-mount",  "--no-python",
                                      "/bin/sh",     "-c",
                                      worker};
  auto r = run(argv, {"HUNG_MOUNT=" + mount}, std::chrono::seconds(90));
  if (r.exit_code() == 77) GTEST_SKIP() << "no FUSE mount here: " << r.err;

  // The agent read the file: the mount held that read.
  auto held = time_of(r.err, R"(hung_fuse: holding \w+ 'error\.json' at ([0-9.]+) s)");
  ASSERT_TRUE(held) << r.err;
  // cohortrun went on after the 2 s limit, said why, and exited as after any failure, while the
  // mount still held the read (cohort_hung_fuse aborts it only once cohortrun has exited).
  auto exited = time_of(r.err, R"(hung_fuse: the command exited at ([0-9.]+) s with status 1\b)");
  ASSERT_TRUE(exited) << r.err;
  EXPECT_NE(r.err.find("could not be read within 2000 ms"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(exitcode *: 3 )"))) << r.err;
  // The bound is the 2 s limit and a margin for a loaded machine; held, cohortrun never exits.
  EXPECT_LT(*exited - *held, 2.0 + 8.0) << r.err;
}

TEST_F(LauncherTest, AStrayStuckInAHungMountDoesNotHoldCohortrunsExit) {
  const std::string mount = dir_ + "/hung";
  ASSERT_EQ(::mkdir(mount.c_str(), 0755), 0);
  // The worker leaves a descendant outside its process group, reading from the mount, and dies
  // once the kernel holds that read; the stray comes back to cohortrun (its subreaper), which
  // kills what the workers left.
  const std::string worker =
      "setsid cat \"$HUNG_MOUNT/data\" & "
      "until grep -q request_wait_answer /proc/$!/wchan; do sleep 0.05; done; exit 3";
  const std::vector<std::string> argv{HUNG_FUSE_BIN, mount,
                                      "30",          "--",
                                      COHORTRUN_BIN, "--nproc-per-node",
                                      "1",           "--max-restarts",
                                      "0",           "--rdzv-id",
                                      "hung-stray",  "--no-python",
                                      "/bin/sh",     "-c",
                                      worker};
  auto r = run(argv, {"HUNG_MOUNT=" + mount}, std::chrono::seconds(90));
  if (r.exit_code() == 77) GTEST_SKIP() << "no FUSE mount here: " << r.err;
  auto held = time_of(r.err, R"(hung_fuse: holding \w+ 'data' at ([0-9.]+) s)");
  ASSERT_TRUE(held) << r.err;
  // SIGKILL cannot end it while the mount holds it: cohortrun waits a bounded while for it (its
  // cgroup's second, the strays' second), then exits as after any failure.
  auto exited = time_of(r.err, R"(hung_fuse: the command exited at ([0-9.]+) s with status 1\b)");
  ASSERT_TRUE(exited) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(exitcode *: 3 )"))) << r.err;
  EXPECT_LT(*exited - *held, 2.0 + 8.0) << r.err;
}

TEST_F(LauncherTest, AWorkerStuckInAHungMountDoesNotHoldSigterm) {
  const std::string mount = dir_ + "/hung";
  ASSERT_EQ(::mkdir(mount.c_str(), 0755), 0);
  // The worker itself reads from the mount; once the kernel holds that read, a helper in its
  // group sends cohortrun (the worker's parent) SIGTERM. Neither SIGTERM nor SIGKILL ends the
  // worker while the mount holds it: cohortrun gives it --term-timeout, then SIGKILL and 5 s,
  // then leaves it behind and exits. Meanwhile it reads the worker's /proc files (its state for
  // TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT, its descendants), which must answer too.
  const std::string worker =
      "p=$PPID; (until grep -qs request_wait_answer /proc/$$/wchan; do sleep 0.05; done; "
      "kill -TERM $p) & exec cat \"$HUNG_MOUNT/data\"";
  const std::vector<std::string> argv{HUNG_FUSE_BIN, mount,
                                      "30",          "--",
                                      COHORTRUN_BIN, "--nproc-per-node",
                                      "1",           "--max-restarts",
                                      "0",           "--term-timeout",
                                      "1",           "--rdzv-id",
                                      "hung-worker", "--no-python",
                                      "/bin/sh",     "-c",
                                      worker};
  auto r = run(argv, {"HUNG_MOUNT=" + mount, "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT=1"},
               std::chrono::seconds(90));
  if (r.exit_code() == 77) GTEST_SKIP() << "no FUSE mount here: " << r.err;
  auto held = time_of(r.err, R"(hung_fuse: holding \w+ 'data' at ([0-9.]+) s)");
  ASSERT_TRUE(held) << r.err;
  // 143: stopped by SIGTERM, as torchrun exits.
  auto exited = time_of(r.err, R"(hung_fuse: the command exited at ([0-9.]+) s with status 143\b)");
  ASSERT_TRUE(exited) << r.err;
  EXPECT_NE(r.err.find("stuck in uninterruptible sleep (D state)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("after SIGKILL (stuck in the kernel"), std::string::npos) << r.err;
  // 1 s of --term-timeout, 5 s after SIGKILL, up to 1 s each for the cgroup and the strays (9.6 s
  // in all here), and a margin for a loaded machine; held, cohortrun never exits.
  EXPECT_LT(*exited - *held, 1.0 + 5.0 + 8.0) << r.err;
}

}  // namespace
}  // namespace cohort::testing
