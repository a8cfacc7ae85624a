// One named spdlog logger per component ("store", "cohortd", "agent", ...), all writing to stderr.
// The level comes from LOGLEVEL (as torchrun: DEBUG, INFO, WARNING, ERROR, CRITICAL) or
// COHORT_LOG_LEVEL, default INFO. Thread-safe.
#pragma once

#include <memory>
#include <string>

namespace spdlog {
class logger;
}

namespace cohort {

// Returns the logger named `component`, creating it on first use.
std::shared_ptr<spdlog::logger> component_logger(const std::string& component);

}  // namespace cohort
