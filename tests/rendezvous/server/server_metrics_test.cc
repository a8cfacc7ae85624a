// What the store server counts, as its /metrics text says it (an in-process server and real
// clients; tests/rendezvous/server/prometheus_scrape.py has a real Prometheus scrape cohortd).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "../raw_client.h"
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
