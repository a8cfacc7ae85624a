// JSON text of anything a worker or a user may have put bytes into (messages, tracebacks, host
// names): invalid UTF-8 becomes U+FFFD instead of an exception from nlohmann::json::dump().
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cohort::launch {

inline std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cohort::launch
