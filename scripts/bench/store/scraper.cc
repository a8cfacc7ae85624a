#include "scraper.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include "cohort/error.h"

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kScrapeTimeout = std::chrono::milliseconds(5000);

std::string format(const char* f, double a, int b, int c, double d, double e) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), f, a, b, c, d, e);
  return buf;
}

}  // namespace

MetricsScraper::MetricsScraper(Endpoint metrics, double interval_s)
    : metrics_(std::move(metrics)), interval_s_(interval_s), thread_([this] { run(); }) {}

MetricsScraper::~MetricsScraper() {
  stop();
}

std::string MetricsScraper::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::string s = format(
      "scraped /metrics every %.1f s: %d scrapes, %d failed, %.1f KiB each, "
      "slowest %.1f ms",
      interval_s_, scrapes_, failures_, last_bytes_ / 1024.0, slowest_ms_);
  if (!last_error_.empty()) s += " (last failure: " + last_error_ + ")";
  return s;
}

void MetricsScraper::run() {
  auto interval =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s_));
  // The first scrape waits one interval: cohortd prints its store address before its metrics
  // endpoint listens.
  auto next = Clock::now() + interval;
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    auto t0 = Clock::now();
    try {
      last_bytes_ = scrape_once();
      ++scrapes_;
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (ms > slowest_ms_) slowest_ms_ = ms;
    } catch (const std::exception& e) {
      ++failures_;
      last_error_ = e.what();
    }
    next += interval;
    lock.lock();
  }
}

size_t MetricsScraper::scrape_once() const {
  Fd fd = connect_blocking(metrics_, kScrapeTimeout);
  send_all(fd.get(), "GET /metrics HTTP/1.1\r\nHost: " + metrics_.text + "\r\n\r\n", kScrapeTimeout,
           "metrics request");
  // The endpoint answers with "Connection: close": read to the end of the stream, each read
  // bounded so that a stuck endpoint fails the scrape instead of hanging the benchmark.
  timeval tv{kScrapeTimeout.count() / 1000, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string response;
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) throw Error("metrics response: none within 5 s");
      throw Error("metrics response: " + errno_text(errno));
    }
    response.append(buf, static_cast<size_t>(n));
  }
  if (response.compare(0, 12, "HTTP/1.1 200") != 0) {
    throw Error("metrics response: " + response.substr(0, response.find('\r')));
  }
  return response.size();
}

}  // namespace cohort::bench
