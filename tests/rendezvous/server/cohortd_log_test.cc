// cohortd's log never stops the store: a stderr pipe nobody reads, or whose reader is gone, does
// not stall or kill it; --log-format json writes one JSON object per line.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "../../common/subprocess.h"
#include "../raw_client.h"
#include "cohort/rdzv/codec.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort::rdzv {
namespace {

using namespace std::chrono_literals;
using cohort::testing::RawClient;
using cohort::testing::Subprocess;

int port_of(const std::string& address_line) {
  return std::stoi(address_line.substr(address_line.rfind(':') + 1));
}

// Each connection sends a 1.13 SET whose key is over --max-key-bytes, so cohortd closes it with
// a warning line (about 150 bytes).
// With `wait`, each connection is seen closed before the next.
void provoke_log_lines(int port, int n, bool wait = false) {
  std::string bad;
  put_u8(&bad, 0);
  put_u64(&bad, 1ull << 40);
  for (int i = 0; i < n; ++i) {
    RawClient c(port);
    c.send(bad);
    if (wait) {
      EXPECT_TRUE(c.closed_by_peer(10s));
    }
  }
}

void expect_served(int port) {
  TcpStoreOptions o;
  o.port = port;
  o.timeout = 10s;
  o.connect_timeout = 10s;
  TcpStore s(o);
  s.set("still", "here");
  EXPECT_EQ(s.get("still"), "here");
}

class CohortdLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohortd_log_XXXXXX";
    dir_ = ::mkdtemp(templ);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CohortdLogTest, AStderrPipeNobodyReadsDoesNotStallClients) {
  Subprocess cohortd({COHORTD_BIN, "--host", "127.0.0.1", "--port", "0"});
  auto address = cohortd.read_line(10s);
  ASSERT_TRUE(address);
  const int port = port_of(*address);
  // 1,000 warning lines are about 150 KB: more than a pipe holds (64 KiB), never read.
  provoke_log_lines(port, 1000);
  expect_served(port);
  EXPECT_FALSE(cohortd.wait(0ms)) << "cohortd exited";
}

TEST_F(CohortdLogTest, AClosedStderrDoesNotKillIt) {
  const std::string port_file = dir_ + "/port";
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(p[1], STDERR_FILENO);
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::execl(COHORTD_BIN, COHORTD_BIN, "--host", "127.0.0.1", "--port", "0", "--port-file",
            port_file.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(p[1]);
  ::close(p[0]);  // the reader is gone before cohortd writes its first line
  int port = 0;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (port == 0 && std::chrono::steady_clock::now() < deadline) {
    std::ifstream f(port_file);
    if (!(f >> port)) port = 0;
    if (port == 0) std::this_thread::sleep_for(5ms);  // polls the file, bounded by the deadline
  }
  ASSERT_NE(port, 0) << "no --port-file";
  provoke_log_lines(port, 20);
  expect_served(port);
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0)
      << "cohortd exited: " << (WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "status");
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
}

TEST_F(CohortdLogTest, JsonFormatWritesOneObjectPerLine) {
  const std::string log = dir_ + "/cohortd.log";
  Subprocess cohortd({COHORTD_BIN, "--host", "127.0.0.1", "--port", "0", "--log-file", log,
                      "--log-format", "json"});
  auto address = cohortd.read_line(10s);
  ASSERT_TRUE(address);
  provoke_log_lines(port_of(*address), 3, /*wait=*/true);  // three warnings
  cohortd.signal(SIGTERM);
  ASSERT_TRUE(cohortd.wait(10s));
  std::ifstream f(log);
  std::string line;
  int lines = 0, warnings = 0;
  while (std::getline(f, line)) {
    ++lines;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    for (const char* field : {"time", "logger", "level", "pid", "msg"})
      EXPECT_TRUE(j.contains(field)) << field << " missing: " << line;
    if (j.value("level", "") == "warning") ++warnings;
  }
  EXPECT_GE(lines, 5);  // listening, three closed connections, signal, stopped
  EXPECT_EQ(warnings, 3);
}

// Out of descriptors, each of cohortd's accept queues fails an accept every 50 ms: that is a line
// at once, then a line a second with how many failed (it was a line each failure, up to 160 a
// second), and once accepting works again, a line saying so (issue 27).
TEST_F(CohortdLogTest, OutOfDescriptorsFailedAcceptsAreALineASecond) {
  Subprocess cohortd({"prlimit", "--nofile=48", COHORTD_BIN, "--host", "127.0.0.1", "--port", "0"});
  auto address = cohortd.read_line(10s);
  ASSERT_TRUE(address);
  const int port = port_of(*address);
  // More than its 48 descriptors: the rest wait in the accept queues, which keep failing.
  std::vector<RawClient> clients;
  for (int i = 0; i < 100; ++i) clients.emplace_back(port);
  auto count = [](const std::string& log, const std::string& what) {
    size_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  // Until the first line that counts failures (a second after the first line).
  std::string log;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (log.find("since the failures began") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    log += cohortd.read_some_stderr(200ms);
  ASSERT_NE(log.find("since the failures began"), std::string::npos) << log.substr(0, 4000);
  EXPECT_NE(log.find("accept failed: Too many open files (retrying"), std::string::npos) << log;
  // The first line and the first count; a third only if this thread lagged a second behind.
  EXPECT_LE(count(log, "accept failed"), 3u) << log;
  // Descriptors freed: it accepts again, and says so once the second since its last line is out.
  clients.clear();
  const auto back_by = std::chrono::steady_clock::now() + 10s;
  while (log.find("accepting again after") == std::string::npos &&
         std::chrono::steady_clock::now() < back_by) {
    RawClient probe(port);
    log += cohortd.read_some_stderr(100ms);
  }
  EXPECT_NE(log.find("accepting again after"), std::string::npos) << log;
  expect_served(port);
  EXPECT_FALSE(cohortd.wait(0ms)) << "cohortd exited";
}

}  // namespace
}  // namespace cohort::rdzv
