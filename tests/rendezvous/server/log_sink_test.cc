// QueuedLogSink: a log nobody reads costs the logging thread nothing and loses counted lines.
#include "server/log_sink.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>

namespace cohort::rdzv {
namespace {

TEST(QueuedLogSink, APipeNobodyReadsDropsLinesWithoutBlocking) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  auto start = std::chrono::steady_clock::now();
  uint64_t dropped = 0;
  {
    auto sink = std::make_shared<QueuedLogSink>(p[1], /*max_queued_bytes=*/8192);
    spdlog::logger log("test", sink);
    // 200,000 lines of about 100 bytes: 20 MB, against a 64 KiB pipe and an 8 KiB queue.
    for (int i = 0; i < 200000; ++i) log.info("line {} of a log that nobody reads at all", i);
    dropped = sink->take_dropped();
    EXPECT_EQ(sink->take_dropped(), 0u) << "take_dropped() resets";
  }  // the destructor gives up on the unread pipe after its grace period
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GT(dropped, 100000u);
  // Generous bound: a blocking sink would never return at all.
  EXPECT_LT(took, std::chrono::seconds(30));
  ::close(p[0]);
  ::close(p[1]);
}

TEST(QueuedLogSink, ItWritesEveryLineToAReader) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  {
    auto sink = std::make_shared<QueuedLogSink>(p[1]);
    spdlog::logger log("test", sink);
    log.set_pattern("%v");
    log.info("one");
    log.info("two");
  }  // the destructor writes what is queued
  ::close(p[1]);
  std::string got;
  char buf[256];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  EXPECT_EQ(got, "one\ntwo\n");
}

}  // namespace
}  // namespace cohort::rdzv
