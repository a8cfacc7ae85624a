// FileTimerServer on a real FIFO, fed the bytes PyTorch's FileTimerClient writes; no process is
// started (the "worker" pids are made up: the server only reports, the agent sends the signal).
#include "workers/file_timer.h"

#include "cohort/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string request(int pid, const std::string& scope, double expiration, int sig) {
  // The exact text of FileTimerRequest.to_json() (json.dumps with its default separators).
  return "{\"version\": 1, \"pid\": " + std::to_string(pid) + ", \"scope_id\": \"" + scope +
         "\", \"expiration_time\": " + std::to_string(expiration) +
         ", \"signal\": " + std::to_string(sig) + "}\n";
}

class FileTimerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("file_timer_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "timer").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // As the client does: open for writing without blocking, one write per request, close.
  void send(const std::string& text) {
    int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);
    ASSERT_GE(fd, 0) << path_;
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
  }
  // Runs the loop until `done` or the deadline.
  template <class Pred>
  bool run_until(Pred done, std::chrono::milliseconds limit = 5s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io_.run_for(20ms);
      io_.restart();
    }
    return done();
  }

  std::shared_ptr<spdlog::logger> log_ =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  asio::io_context io_;
  std::filesystem::path dir_;
  std::string path_;
  std::vector<std::tuple<pid_t, std::string, int>> expired_;
};

TEST_F(FileTimerTest, ParsesWhatPyTorchsClientWrites) {
  FileTimerServer::Request r;
  ASSERT_TRUE(FileTimerServer::parse_request(request(4242, "step", 1.7e9, 9), &r));
  EXPECT_EQ(r.pid, 4242);
  EXPECT_EQ(r.scope, "step");
  EXPECT_DOUBLE_EQ(r.expiration_time, 1.7e9);
  EXPECT_EQ(r.signal, 9);
  EXPECT_TRUE(FileTimerServer::parse_request(request(7, "s", -1, 0), &r));
  EXPECT_LT(r.expiration_time, 0);
  for (const char* bad : {"", "not json", "[]", "{\"pid\": 1}",
                          "{\"pid\": \"x\", \"scope_id\": "
                          "\"s\", \"expiration_time\": 1}",
                          "{\"pid\": -3, \"scope_id\": \"s\", \"expiration_time\": 1}",
                          // 2^32 + 1 wrapped to pid 1 before; a fraction was truncated
                          "{\"pid\": 4294967297, \"scope_id\": \"s\", \"expiration_time\": 1}",
                          "{\"pid\": 42.5, \"scope_id\": \"s\", \"expiration_time\": 1}"}) {
    EXPECT_FALSE(FileTimerServer::parse_request(bad, &r)) << bad;
  }
}

TEST_F(FileTimerTest, AnExpiredTimerIsReportedOnceWithItsSignalAndAReleasedOneNever) {
  FileTimerServer server(io_, path_, log_, [&](pid_t pid, const std::string& scope, int sig) {
    expired_.emplace_back(pid, scope, sig);
  });
  const double now = wall_now();
  send(request(101, "released", now + 0.3, 9));
  send(request(101, "released", -1, 0));
  // Split across two writes, as a reader may see it.
  std::string late = request(202, "step", now + 0.3, 15);
  send(late.substr(0, 10));
  send(late.substr(10));
  send("garbage that is no request\n");
  send(request(303, "far", now + 3600, 9));
  ASSERT_TRUE(run_until([&] { return !expired_.empty(); }));
  EXPECT_GE(wall_now(), now + 0.3);
  ASSERT_EQ(expired_.size(), 1u);
  EXPECT_EQ(expired_[0], std::make_tuple(pid_t{202}, std::string("step"), 15));
  run_until([] { return false; }, 500ms);
  EXPECT_EQ(expired_.size(), 1u) << "reported twice";
  EXPECT_EQ(server.active_timers(), 1u);  // pid 303's
  server.forget(303);
  EXPECT_EQ(server.active_timers(), 0u);
}

TEST_F(FileTimerTest, ATimerWithoutASignalIsDroppedUnreported) {
  FileTimerServer server(io_, path_, log_, [&](pid_t pid, const std::string& scope, int sig) {
    expired_.emplace_back(pid, scope, sig);
  });
  send(request(11, "no_signal", wall_now() - 1, 0));
  ASSERT_TRUE(run_until([&] { return server.active_timers() == 0; }));
  EXPECT_TRUE(expired_.empty());
}

TEST_F(FileTimerTest, TheFifoReplacesAStaleFileAndGoesWithTheServer) {
  { std::ofstream(path_) << "stale"; }
  {
    FileTimerServer server(io_, path_, log_, [](pid_t, const std::string&, int) {});
    EXPECT_TRUE(std::filesystem::is_fifo(path_));
  }
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_THROW(FileTimerServer(io_, (dir_ / "no" / "such" / "dir").string(), log_,
                               [](pid_t, const std::string&, int) {}),
               IoError);
}

TEST(FileTimerPath, FollowsTorchrunsRules) {
  EXPECT_EQ(file_timer_path({}), "");
  EXPECT_EQ(file_timer_path({{"TORCHELASTIC_ENABLE_FILE_TIMER", "0"}}), "");
  EXPECT_EQ(file_timer_path({{"TORCHELASTIC_TIMER_FILE", "/x"}}), "");  // not enabled
  EXPECT_EQ(file_timer_path(
                {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", "/run/t"}}),
            "/run/t");
  const std::string made =
      file_timer_path({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TMPDIR", "/scratch"}});
  EXPECT_EQ(made.rfind("/scratch/watchdog_timer_", 0), 0u) << made;
}

}  // namespace
}  // namespace cohort::launch
