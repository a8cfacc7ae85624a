// cohortd's logging: its "cohortd" and "store" loggers write through a QueuedLogSink (log_sink.h)
// to stderr or a --log-file, as text lines or as one JSON object per line, and never block the
// event loop.
//
// Thread safety: construct and destroy on one thread, before and after the server runs; the
// loggers it installs are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace cohort::rdzv {

class QueuedLogSink;

enum class LogFormat { kText, kJson };
LogFormat parse_log_format(const std::string& text);  // throws UsageError

class CohortdLog {
 public:
  // Installs the loggers. `file` empty: stderr; else appended to (created 0644). Throws IoError
  // naming the file when it cannot be opened.
  CohortdLog(const std::string& file, LogFormat format);
  // Writes what is queued (a second at most) and removes the loggers.
  ~CohortdLog();
  CohortdLog(const CohortdLog&) = delete;
  CohortdLog& operator=(const CohortdLog&) = delete;

  // Lines dropped since the last call (nobody read the log fast enough).
  uint64_t take_dropped();

 private:
  int fd_ = -1;
  bool own_fd_ = false;
  std::shared_ptr<QueuedLogSink> sink_;
};

}  // namespace cohort::rdzv
