// The /metrics endpoint: the flags that place it, and real HTTP against it on loopback (its own
// loop thread; no process is started).
#include "cohort/base/metrics_endpoint.h"

#include <gtest/gtest.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../rendezvous/raw_client.h"
#include "cohort/error.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;
using cohort::testing::RawClient;

TEST(MetricsAddress, FlagsAreReadAndBadOnesNamed) {
  EXPECT_FALSE(metrics_address("", -1, "0.0.0.0").enabled());
  auto a = metrics_address("", 9400, "10.0.0.1");
  EXPECT_EQ(a.host, "10.0.0.1");
  EXPECT_EQ(a.port, 9400);
  a = metrics_address("127.0.0.1:0", 9400, "0.0.0.0");  // --metrics-addr wins
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 0);
  EXPECT_THROW(metrics_address("", 70000, "0.0.0.0"), UsageError);
  try {
    metrics_address("localhost", -1, "0.0.0.0");
    FAIL() << "a missing port was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-addr"), std::string::npos) << e.what();
  }
}

// An endpoint on a loop of its own thread, rendering a fixed text.
class EndpointTest : public ::testing::Test {
 protected:
  EndpointTest()
      : endpoint_(io_, MetricsAddress{"127.0.0.1", 0}, [] { return std::string("m 1\n"); }) {
    thread_ = std::thread([this] { io_.run(); });
  }
  ~EndpointTest() override {
    io_.stop();
    thread_.join();
  }
  // Sends `request` and reads the whole reply (the server closes the connection).
  std::string ask(const std::string& request) {
    RawClient c(endpoint_.port());
    c.send(request);
    std::string reply;
    while (auto chunk = c.read(1, 5s)) reply += *chunk;
    return reply;
  }
  asio::io_context io_;
  MetricsEndpoint endpoint_;
  std::thread thread_;
};

TEST_F(EndpointTest, ServesMetricsAndRefusesTheRest) {
  std::string r = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r;
  EXPECT_NE(r.find("Content-Length: 4\r\n"), std::string::npos) << r;
  EXPECT_EQ(r.substr(r.size() - 4), "m 1\n");
  EXPECT_EQ(ask("GET /healthz HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200 OK", 0), 0u);
  EXPECT_EQ(ask("GET /other HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(ask("POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(ask(std::string(9000, 'a')).rfind("HTTP/1.1 431", 0), 0u);
  EXPECT_EQ(ask("nonsense\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
}

TEST_F(EndpointTest, ClientsThatSendNothingCannotLockOutAScrape) {
  // More silent connections than the endpoint keeps open (64): the oldest give way to newcomers,
  // so a scrape that comes now is answered at once (it used to be closed unanswered for as long
  // as 64 of them were open).
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < 200; ++i) silent.push_back(std::make_unique<RawClient>(endpoint_.port()));
  const auto t0 = std::chrono::steady_clock::now();
  std::string r = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  // The oldest of them were closed to make room.
  EXPECT_TRUE(silent.front()->closed_by_peer(5s)) << "the oldest silent connection was kept";
}

}  // namespace
}  // namespace cohort
