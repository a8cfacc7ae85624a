// --event-log-handler console: torchrun's events, one JSON object per line, in torchrun's shape
// (torch/distributed/elastic/agent/server/api.py, _construct_event; events/api.py, Event).
#include "failure/event_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "loop/console.h"

namespace cohort::launch {
namespace {

using nlohmann::json;

// A console on a temporary regular file (written directly, without the loop), read back as lines.
class EventLogTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(file_, nullptr); }
  void TearDown() override {
    if (file_) std::fclose(file_);
  }
  std::vector<json> events() {
    std::string text;
    char buf[4096];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(::fileno(file_), buf, sizeof(buf), at);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      at += n;
    }
    std::vector<json> out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) out.push_back(json::parse(line));
    EXPECT_TRUE(text.empty() || text.back() == '\n') << text;
    return out;
  }
  EventContext context() {
    return EventContext{"run-7", "default", "node1", "c10d", "train.py", 3};
  }

  asio::io_context io_;
  std::FILE* file_ = std::tmpfile();
  ConsoleStream console_{io_, ::fileno(file_)};
};

TEST_F(EventLogTest, AWorkerEventHasTorchrunsFieldsWithItsOwnNestedAsAString) {
  EventLog log(&console_, context());
  log.worker("FAILED", 1, 2, 0, 2, 4, 4242, 3, 1, "{\"message\": \"boom\"}");
  const auto e = events();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["name"], "torchelastic.worker.status.FAILED");
  EXPECT_EQ(e[0]["source"], "WORKER");
  EXPECT_EQ(e[0]["timestamp"], 0);
  const json& md = e[0]["metadata"];
  EXPECT_EQ(md["run_id"], "run-7");
  EXPECT_EQ(md["global_rank"], 2);
  EXPECT_EQ(md["group_rank"], 1);
  EXPECT_EQ(md["worker_id"], "4242");
  EXPECT_EQ(md["role"], "default");
  EXPECT_EQ(md["hostname"], "node1");
  EXPECT_EQ(md["state"], "FAILED");
  EXPECT_EQ(md["rdzv_backend"], "c10d");
  EXPECT_EQ(md["raw_error"], "{\"message\": \"boom\"}");
  EXPECT_EQ(md["agent_restarts"], 1);
  EXPECT_TRUE(md["duration_ms"].is_null());
  EXPECT_GE(md["total_run_time"].get<int>(), 0);
  ASSERT_TRUE(md["metadata"].is_string());
  const json inner = json::parse(md["metadata"].get<std::string>());
  EXPECT_EQ(inner["group_world_size"], 2);
  EXPECT_EQ(inner["entry_point"], "train.py");
  EXPECT_EQ(inner["local_rank"], json::array({0}));
  EXPECT_EQ(inner["role_rank"], json::array({2}));
  EXPECT_EQ(inner["role_world_size"], json::array({4}));
  EXPECT_EQ(inner["exit_code"], json::array({3}));
  EXPECT_EQ(inner["worker_pid"], json::array({4242}));
}

TEST_F(EventLogTest, AStartingWorkerHasNoExitCodeAndNoError) {
  EventLog log(&console_, context());
  log.worker("START", 0, 1, 1, 1, 2, 77, std::nullopt, 0);
  const auto e = events();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_TRUE(e[0]["metadata"]["raw_error"].is_null());
  const json inner = json::parse(e[0]["metadata"]["metadata"].get<std::string>());
  EXPECT_EQ(inner["exit_code"], json::array({nullptr}));
}

TEST_F(EventLogTest, TheAgentsEventNamesNoWorker) {
  EventLog log(&console_, context());
  log.worker("SUCCEEDED", 0, 1, 0, 0, 1, 10, 0, 2);
  log.agent("SUCCEEDED", 0, 1, 2);
  const auto e = events();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1]["name"], "torchelastic.worker.status.SUCCEEDED");
  EXPECT_EQ(e[1]["source"], "AGENT");
  const json& md = e[1]["metadata"];
  EXPECT_TRUE(md["global_rank"].is_null());
  EXPECT_TRUE(md["worker_id"].is_null());
  EXPECT_EQ(md["agent_restarts"], 2);
  const json inner = json::parse(md["metadata"].get<std::string>());
  EXPECT_EQ(inner, (json{{"group_world_size", 1}, {"entry_point", "train.py"}}));
}

TEST_F(EventLogTest, InvalidUtf8InAnErrorIsReplacedNotThrown) {
  EventLog log(&console_, context());
  EXPECT_NO_THROW(log.agent("FAILED", 0, 1, 0, "cut \xe2\x96"));
  const auto e = events();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["metadata"]["raw_error"], "cut \xef\xbf\xbd");
}

TEST(EventLog, WithoutASinkNothingIsWritten) {
  EventLog log(nullptr, EventContext{});
  EXPECT_NO_THROW(log.worker("START", 0, 1, 0, 0, 1, 1, std::nullopt, 0));
  EXPECT_NO_THROW(log.agent("FAILED", 0, 1, 0));
}

}  // namespace
}  // namespace cohort::launch
