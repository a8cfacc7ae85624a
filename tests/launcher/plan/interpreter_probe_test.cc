// The interpreter probe on real interpreters: PyTorch 1.13's Debian python and scripts/torch2.sh's
// 2.15 environment each name their own PyTorch; a torch found first on PYTHONPATH is the one
// named; an interpreter that is missing, fails or hangs gives nothing (a hung one is killed at
// the timeout), never an error.
#include "plan/interpreter_probe.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const char* kTorch1Python = "/usr/bin/python3";
const char* kTorch2Python = "/root/.cache/cohort/torch-2.15.0/bin/python";

// The environment's PATH only, as the workers' environment carries it.
std::vector<std::string> plain_env() {
  return {"PATH=/usr/bin:/bin"};
}

// A folder of its own, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "cohort-probe-XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories((path_ / name).parent_path());
    std::ofstream(path_ / name) << text;
  }

 private:
  fs::path path_;
};

TEST(ProbeInterpreter, Torch113sPythonNamesTorch113) {
  if (::access(kTorch1Python, X_OK) != 0) GTEST_SKIP() << "no " << kTorch1Python;
  auto info = probe_interpreter(kTorch1Python, plain_env(), 10s);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->executable, kTorch1Python);
  EXPECT_EQ(info->python_version.rfind("3.", 0), 0u) << info->python_version;
  EXPECT_EQ(info->torch_version.rfind("1.13", 0), 0u) << info->torch_version;
  EXPECT_TRUE(fs::exists(fs::path(info->torch_dir) / "torch" / "version.py")) << info->torch_dir;
  EXPECT_EQ(describe_python(*info), "Python " + info->python_version + ", torch " +
                                        info->torch_version + " from " + info->torch_dir);
}

TEST(ProbeInterpreter, Torch2sEnvironmentNamesItsOwnTorchNotTheSystems) {
  if (::access(kTorch2Python, X_OK) != 0) GTEST_SKIP() << "no " << kTorch2Python;
  auto info = probe_interpreter(kTorch2Python, plain_env(), 10s);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->executable, kTorch2Python);
  EXPECT_EQ(info->torch_version.rfind("2.", 0), 0u) << info->torch_version;
  EXPECT_EQ(info->torch_dir.rfind("/root/.cache/cohort/torch-2.15.0/", 0), 0u) << info->torch_dir;
}

TEST(ProbeInterpreter, ATorchFirstOnThePythonPathIsTheOneNamedWithoutImportingIt) {
  if (::access(kTorch1Python, X_OK) != 0) GTEST_SKIP() << "no " << kTorch1Python;
  TempDir dir;
  // Importing this torch would fail: the probe reads its version.py instead.
  dir.write("torch/__init__.py", "raise SystemExit('imported')\n");
  dir.write("torch/version.py", "__version__ = '9.8.7+test'\n");
  auto env = plain_env();
  env.push_back("PYTHONPATH=" + dir.path().string());
  auto info = probe_interpreter(kTorch1Python, env, 10s);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->torch_version, "9.8.7+test");
  EXPECT_EQ(info->torch_dir, dir.path().string());

  // A torch without a readable version.py is named "?", not left out.
  fs::remove(dir.path() / "torch" / "version.py");
  info = probe_interpreter(kTorch1Python, env, 10s);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->torch_version, "?");
}

TEST(DescribePython, APythonWithoutTorchSaysSo) {
  EXPECT_EQ(describe_python({"/x/python", "3.11.2", "", ""}), "Python 3.11.2, no torch");
}

TEST(ProbeInterpreter, AMissingOrFailingInterpreterGivesNothing) {
  EXPECT_FALSE(probe_interpreter("/nonexistent/python3", plain_env(), 10s));
  EXPECT_FALSE(probe_interpreter("no-such-python-on-path", plain_env(), 10s));
  EXPECT_FALSE(probe_interpreter("/bin/false", plain_env(), 10s));
}

TEST(ProbeInterpreter, AHungInterpreterIsKilledAtTheTimeout) {
  if (::access(kTorch1Python, X_OK) != 0) GTEST_SKIP() << "no " << kTorch1Python;
  TempDir dir;
  // Runs at startup, before the probe: a python that does not answer for 20 s (were it not
  // killed, the test fails after that, not hangs).
  dir.write("sitecustomize.py", "import time\ntime.sleep(20)\n");
  auto env = plain_env();
  env.push_back("PYTHONPATH=" + dir.path().string());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(probe_interpreter(kTorch1Python, env, 300ms));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 5s) << "the probe waited past its timeout";
  // It was reaped: no child of this process is left.
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(InterpreterProbe, ItsPidIsKnownAtOnceAndItsResultOnceDone) {
  if (::access(kTorch1Python, X_OK) != 0) GTEST_SKIP() << "no " << kTorch1Python;
  std::atomic<int> calls{0};
  std::optional<InterpreterInfo> passed, info;
  {
    InterpreterProbe probe(kTorch1Python, plain_env(),
                           [&](const std::optional<InterpreterInfo>& got) {
                             passed = got;
                             ++calls;
                           });
    EXPECT_GT(probe.pid(), 0) << "the probe's process is known before the constructor returns";
    info = probe.wait(10s);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->executable, kTorch1Python);
    EXPECT_EQ(probe.pid(), -1) << "reaped once done";
    ASSERT_TRUE(probe.result());
    EXPECT_EQ(probe.result()->torch_version, info->torch_version);
  }  // joins the probe's thread, which runs on_done after wait() may have returned
  EXPECT_EQ(calls.load(), 1);
  ASSERT_TRUE(passed);
  EXPECT_EQ(passed->torch_version, info->torch_version);
}

TEST(InterpreterProbe, AnInterpreterThatCannotStartFinishesWithNothing) {
  std::atomic<int> calls{0};
  {
    InterpreterProbe probe("/nonexistent/python3", plain_env(),
                           [&](const std::optional<InterpreterInfo>& info) {
                             EXPECT_FALSE(info);
                             ++calls;
                           });
    EXPECT_EQ(probe.pid(), -1);
    EXPECT_FALSE(probe.wait(5s));
    EXPECT_FALSE(probe.result());
  }
  EXPECT_EQ(calls.load(), 1) << "on_done runs even when nothing could be started";
}

}  // namespace
}  // namespace cohort::launch
