// One named spdlog logger per component ("store", "cohortd", "agent", ...), all writing to stderr.
// The level comes from LOGLEVEL (as torchrun: DEBUG, INFO, WARNING, ERROR, CRITICAL) or
// COHORT_LOG_LEVEL, default INFO. Thread-safe.
#pragma once

#include <memory>
#include <string>

namespace spdlog {
class logger;
namespace sinks {
class sink;
}
}  // namespace spdlog

namespace cohort {

// Returns the logger named `component`, creating it on first use. `default_level` ("info",
// "warning", ...) applies when neither LOGLEVEL nor COHORT_LOG_LEVEL is set.
std::shared_ptr<spdlog::logger> component_logger(const std::string& component,
                                                 const std::string& default_level = "info");

// A logger of its own (not in spdlog's registry) named `component`, writing to `sink`, with the
// same level rules and line format: for a program that owns where its log lines go (cohortrun's
// non-blocking console), and for several of them in one process (tests).
std::shared_ptr<spdlog::logger> private_logger(const std::string& component,
                                               std::shared_ptr<spdlog::sinks::sink> sink,
                                               const std::string& default_level = "info");

}  // namespace cohort
