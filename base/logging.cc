#include "cohort/base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace cohort {
namespace {

spdlog::level::level_enum level_from_env(const std::string& default_level) {
  const char* v = std::getenv("COHORT_LOG_LEVEL");
  if (v == nullptr || *v == '\0') v = std::getenv("LOGLEVEL");
  std::string s(v != nullptr && *v != '\0' ? v : default_level.c_str());
  std::transform(s.begin(), s.end(), s.begin(), ::toupper);
  if (s == "TRACE") return spdlog::level::trace;
  if (s == "DEBUG") return spdlog::level::debug;
  if (s == "INFO") return spdlog::level::info;
  if (s == "WARNING" || s == "WARN") return spdlog::level::warn;
  if (s == "ERROR") return spdlog::level::err;
  if (s == "CRITICAL" || s == "FATAL") return spdlog::level::critical;
  if (s == "OFF") return spdlog::level::off;
  return spdlog::level::info;
}

constexpr const char* kPattern = "[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v";

}  // namespace

std::shared_ptr<spdlog::logger> private_logger(const std::string& component,
                                               std::shared_ptr<spdlog::sinks::sink> sink,
                                               const std::string& default_level) {
  auto logger = std::make_shared<spdlog::logger>(component, std::move(sink));
  logger->set_level(level_from_env(default_level));
  logger->set_pattern(kPattern);
  return logger;
}

std::shared_ptr<spdlog::logger> component_logger(const std::string& component,
                                                 const std::string& default_level) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (auto existing = spdlog::get(component)) return existing;
  auto logger = spdlog::stderr_color_mt(component);
  logger->set_level(level_from_env(default_level));
  logger->set_pattern(kPattern);
  return logger;
}

}  // namespace cohort
