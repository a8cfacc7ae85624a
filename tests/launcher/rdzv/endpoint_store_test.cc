// EndpointStore: the c10d endpoint's store as a real cohortd process (the one built next to this
// test) on 127.0.0.1. It serves at once, in a session of its own, outlives the object that
// started it and exits by itself once idle for the linger time; a port already served means
// "join it" (nullptr); the job's token is required of clients, and the token file it was passed
// is gone once it listens.
#include "rdzv/endpoint_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "../../common/free_port.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

TcpStoreOptions client_of(int port, std::string token = "") {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = 2s;
  o.connect_timeout = 2s;
  o.auth_token = std::move(token);
  return o;
}

// True once `pid` (a child of this process) has exited within `timeout`; it is reaped.
bool exits_within(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return true;
    ::usleep(5000);  // polling a condition, with the deadline above
  }
  return false;
}

class EndpointStoreTest : public ::testing::Test {
 protected:
  // TMPDIR of its own, so that the test sees every file the store leaves there.
  EndpointStoreTest() {
    std::string t = (fs::temp_directory_path() / "cohort-endpoint-XXXXXX").string();
    dir_ = ::mkdtemp(t.data());
    if (const char* old = std::getenv("TMPDIR")) old_tmpdir_ = old;
    ::setenv("TMPDIR", dir_.c_str(), 1);
  }
  ~EndpointStoreTest() override {
    for (pid_t pid : started_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (old_tmpdir_) {
      ::setenv("TMPDIR", old_tmpdir_->c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
    fs::remove_all(dir_);
  }

  std::unique_ptr<EndpointStore> start(int port, StoreSecurity security = {},
                                       std::chrono::milliseconds linger = 30s) {
    auto store = EndpointStore::start("127.0.0.1", port, security, linger);
    if (store) started_.push_back(store->pid());
    return store;
  }

  fs::path dir_;
  std::optional<std::string> old_tmpdir_;
  std::vector<pid_t> started_;  // killed at the end, if still running
};

TEST_F(EndpointStoreTest, ItServesAtOnceInASessionOfItsOwnAndOutlivesItsStarter) {
  ASSERT_EQ(::access(EndpointStore::cohortd_path().c_str(), X_OK), 0)
      << "no cohortd next to the test: " << EndpointStore::cohortd_path();
  const int port = testing::free_port();
  auto store = start(port);
  ASSERT_TRUE(store);
  const pid_t pid = store->pid();
  EXPECT_GT(pid, 0);
  EXPECT_NE(store->address().find(std::to_string(port)), std::string::npos) << store->address();
  EXPECT_EQ(::getsid(pid), pid) << "a Ctrl-C to the job's process group would reach it";
  EXPECT_EQ(store->log_path(), (dir_ / ("cohortd-endpoint-" + std::to_string(::getuid()) + "-" +
                                        std::to_string(port) + ".log"))
                                   .string());
  EXPECT_TRUE(fs::exists(store->log_path()));
  TcpStore client(client_of(port));
  client.set("k", "v");
  store.reset();
  EXPECT_EQ(::kill(pid, 0), 0) << "it died with the object that started it";
  EXPECT_EQ(client.get("k"), "v");
}

TEST_F(EndpointStoreTest, OnceIdleForTheLingerItExitsByItself) {
  const int port = testing::free_port();
  auto store = start(port, {}, 200ms);
  ASSERT_TRUE(store);
  const pid_t pid = store->pid();
  {
    TcpStore client(client_of(port));
    client.set("k", "v");
    EXPECT_FALSE(exits_within(pid, 300ms)) << "it left while a client was connected";
  }
  EXPECT_TRUE(exits_within(pid, 5s)) << "still running long after its last client left";
  started_.clear();  // reaped
}

TEST_F(EndpointStoreTest, APortAlreadyServedMeansJoinIt) {
  const int port = testing::free_port();
  auto first = start(port);
  ASSERT_TRUE(first);
  auto second = start(port);
  EXPECT_FALSE(second) << "a second store started on a served port";
  // The first still serves; the second cohortd was reaped (no child left but the first).
  TcpStore client(client_of(port));
  client.set("k", "v");
  int status = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), 0) << "only the running first store is a child";
}

TEST_F(EndpointStoreTest, TheJobsTokenIsRequiredAndItsFileIsGoneOnceItListens) {
  const int port = testing::free_port();
  auto store = start(port, {"endpoint-token-0123456789", ""});
  ASSERT_TRUE(store);
  TcpStore member(client_of(port, "endpoint-token-0123456789"));
  member.set("k", "v");
  EXPECT_ANY_THROW({
    TcpStore stranger(client_of(port));
    stranger.get("k");
  });
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().rfind("cohort-token-", 0), std::string::npos)
        << "the token's file was left behind: " << entry.path();
  }
}

}  // namespace
}  // namespace cohort::launch
