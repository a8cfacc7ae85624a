#include "server/cohortd_log.h"

#include <fcntl.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/base/logging.h"
#include "cohort/error.h"
#include "server/log_sink.h"

namespace cohort::rdzv {
namespace {

// The loggers of cohortd's process: its own and the server's.
constexpr const char* kLoggers[] = {"cohortd", "store"};

// %* in a pattern: the message as a JSON string, quotes included.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    dest.push_back('"');
    for (char c : msg.payload) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        dest.push_back('\\');
        dest.push_back(c);
      } else if (u < 0x20) {
        char esc[8];
        std::snprintf(esc, sizeof(esc), "\\u%04x", u);
        dest.append(esc, esc + 6);
      } else {
        dest.push_back(c);
      }
    }
    dest.push_back('"');
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

std::unique_ptr<spdlog::formatter> json_formatter() {
  auto f = std::make_unique<spdlog::pattern_formatter>();
  f->add_flag<JsonMessageFlag>('*').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","logger":"%n","level":"%l","pid":%P,"msg":%*})");
  return f;
}

}  // namespace

LogFormat parse_log_format(const std::string& text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  throw UsageError("--log-format must be text or json, not '" + text + "'");
}

CohortdLog::CohortdLog(const std::string& file, LogFormat format) {
  if (file.empty()) {
    fd_ = STDERR_FILENO;
  } else {
    fd_ = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError("cannot open --log-file " + file + ": " + std::strerror(errno));
    own_fd_ = true;
  }
  sink_ = std::make_shared<QueuedLogSink>(fd_);
  for (const char* name : kLoggers) {
    spdlog::drop(name);
    auto logger = private_logger(name, sink_);
    if (format == LogFormat::kJson) logger->set_formatter(json_formatter());
    spdlog::register_logger(logger);
  }
}

CohortdLog::~CohortdLog() {
  for (const char* name : kLoggers) spdlog::drop(name);
  sink_.reset();  // the last owner: its writer thread writes what it can and stops
  if (own_fd_) ::close(fd_);
}

uint64_t CohortdLog::take_dropped() {
  return sink_->take_dropped();
}

}  // namespace cohort::rdzv
