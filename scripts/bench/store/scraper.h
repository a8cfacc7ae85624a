// A Prometheus-like scraper for store_bench's "cohortd-scraped" server: a thread that fetches
// http://<endpoint>/metrics every interval while the ops cells and storms run, so that the report
// shows what a scraping Prometheus costs cohortd's clients.
//
// One owner; the destructor stops and joins the thread. The counters are read after stop().
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "net.h"

namespace cohort::bench {

class MetricsScraper {
 public:
  MetricsScraper(Endpoint metrics, double interval_s);
  ~MetricsScraper();  // stop()
  MetricsScraper(const MetricsScraper&) = delete;
  MetricsScraper& operator=(const MetricsScraper&) = delete;

  // Ends the thread; idempotent. Returns a summary for the report's notes, for example
  // "scraped /metrics every 1.0 s: 42 scrapes, 0 failed, 7.1 KiB each, slowest 1.2 ms".
  std::string stop();

 private:
  void run();
  // One GET /metrics; returns the response's size in bytes. Throws cohort::Error.
  size_t scrape_once() const;

  Endpoint metrics_;
  double interval_s_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  int scrapes_ = 0, failures_ = 0;
  size_t last_bytes_ = 0;
  double slowest_ms_ = 0;
  std::string last_error_;
  std::thread thread_;
};

}  // namespace cohort::bench
