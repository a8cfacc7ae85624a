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

// Returns the logger named `component`, creating it on first use. `default_level` ("info",
// "warning", ...) applies when neither LOGLEVEL nor COHORT_LOG_LEVEL is set.
std::shared_ptr<spdlog::logger> component_logger(const std::string& component,
                                                 const std::string& default_level = "info");

}  // namespace cohort
