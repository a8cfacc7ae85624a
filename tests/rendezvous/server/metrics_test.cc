// Metrics: Prometheus' text format, the /metrics endpoint over real HTTP, and what the store
// server counts (tests/rendezvous/server/prometheus_scrape.py has a real Prometheus scrape
// cohortd).
#include <gtest/gtest.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "../raw_client.h"
#include "cohort/base/metrics_endpoint.h"
#include "cohort/base/prometheus.h"
#include "cohort/error.h"
#include "cohort/rdzv/cohortd.h"
#include "cohort/rdzv/server.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;
using cohort::testing::RawClient;

// The value of the one series `series` (name and labels exactly as printed), or -1.
double value_of(const std::string& text, const std::string& series) {
  const std::string at = "\n" + series + " ";
  size_t p = ("\n" + text).find(at);
  if (p == std::string::npos) return -1;
  return std::stod(text.substr(p + series.size() + 1 - 1 + 1));
}

TEST(PrometheusText, HistogramBucketsAreCumulativeAndLabelsEscaped) {
  const double bounds[] = {0.001, 0.01};
  prom::Histogram h(bounds);
  h.observe(0.0005);
  h.observe(0.001);  // on a bound: counted in that bucket (le)
  h.observe(0.005);
  h.observe(3);
  prom::Exposition out;
  out.family("x_seconds", "histogram", "Test");
  out.histogram("x_seconds", {{"op", "a\"b\\c\nd"}}, h);
  EXPECT_EQ(out.text(),
            "# HELP x_seconds Test\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{op=\"a\\\"b\\\\c\\nd\",le=\"0.001\"} 2\n"
            "x_seconds_bucket{op=\"a\\\"b\\\\c\\nd\",le=\"0.01\"} 3\n"
            "x_seconds_bucket{op=\"a\\\"b\\\\c\\nd\",le=\"+Inf\"} 4\n"
            "x_seconds_sum{op=\"a\\\"b\\\\c\\nd\"} 3.0065\n"
            "x_seconds_count{op=\"a\\\"b\\\\c\\nd\"} 4\n");
  EXPECT_EQ(prom::number(1e15), "1000000000000000");
  EXPECT_EQ(prom::number(0.25), "0.25");
}

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

TEST(MetricsAddress, CohortdServesItsMetricsOnLoopbackUnlessToldOtherwise) {
  auto parsed = [](std::vector<std::string> args) {
    args.insert(args.begin(), "cohortd");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    rdzv::CohortdConfig config;
    EXPECT_EQ(rdzv::parse_cohortd_args(static_cast<int>(argv.size()), argv.data(), &config), -1);
    return rdzv::cohortd_metrics_address(config);
  };
  // The store on every interface (--host's default), its metrics on loopback only.
  auto a = parsed({"--metrics-port", "9400"});
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 9400);
  EXPECT_EQ(parsed({"--host", "10.0.0.1", "--metrics-port", "0"}).host, "127.0.0.1");
  EXPECT_EQ(parsed({"--metrics-addr", "0.0.0.0:9400"}).host, "0.0.0.0");  // as told
  EXPECT_FALSE(parsed({}).enabled());
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

rdzv::StoreServerOptions local() {
  rdzv::StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  return o;
}

TEST(StoreServerMetrics, CountsRequestsWaitsRejectionsAndKeys) {
  rdzv::StoreServerThread server(local());
  TcpStoreOptions o;
  o.port = server.port();
  o.timeout = 5s;
  TcpStore store(o);
  store.set("a", "12345");
  store.set("b", "x");
  EXPECT_EQ(store.get("a"), "12345");
  store.add("n", 3);
  // A WAIT that parks until another client's SET: its latency runs until then.
  std::thread late([&] {
    TcpStore other(o);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (server.stats().parked_waits == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);  // the parked WAIT's measured duration: at least this
    other.set("late", "1");
  });
  const std::string keys[] = {"late"};
  store.wait(keys, 5000ms);
  late.join();
  // A malformed request closes its connection and is counted by reason.
  RawClient bad(server.port());
  bad.send(std::string("\xff\xff\xff\xff", 4));
  EXPECT_FALSE(bad.read(1, 5s).has_value());

  const std::string m = server.metrics_text();
  EXPECT_EQ(value_of(m, "cohortd_request_duration_seconds_count{op=\"SET\"}"), 2 + 1 + 0);
  EXPECT_EQ(value_of(m, "cohortd_request_duration_seconds_count{op=\"GET\"}"), 1);
  EXPECT_EQ(value_of(m, "cohortd_request_duration_seconds_count{op=\"ADD\"}"), 1);
  // The parked WAIT counts once woken, with its wait: above 10 ms, where the rest are not.
  const double waits = value_of(m, "cohortd_request_duration_seconds_count{op=\"WAIT\"}");
  EXPECT_GE(waits, 1);
  EXPECT_GE(value_of(m, "cohortd_request_duration_seconds_sum{op=\"WAIT\"}"), 0.04);
  EXPECT_EQ(value_of(m, "cohortd_request_duration_seconds_bucket{op=\"WAIT\",le=\"0.01\"}"),
            waits - 1);
  EXPECT_EQ(value_of(m, "cohortd_requests_rejected_total{reason=\"malformed\"}"), 1);
  EXPECT_EQ(value_of(m, "cohortd_connections_closed_total{reason=\"limit\"}"), 1);
  EXPECT_EQ(value_of(m, "cohortd_keys"), 4);  // a, b, n, late
  EXPECT_EQ(value_of(m, "cohortd_stored_bytes"), 1 + 5 + 1 + 1 + 1 + 1 + 4 + 1);
  EXPECT_EQ(value_of(m, "cohortd_connections{dialect=\"current\",authenticated=\"true\"}"), 1);
  EXPECT_EQ(value_of(m, "cohortd_parked_waits"), 0);
  EXPECT_EQ(m.find("cohortd_log_bytes"), std::string::npos) << "no --data-dir, no log metrics";
}

}  // namespace
}  // namespace cohort
