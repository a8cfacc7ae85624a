#include "cohort/base/error_file_format.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace cohort::error_file {
namespace {

using nlohmann::json;

// Invalid UTF-8 (a what() string, a traceback) must not make the dump itself throw.
template <typename Json>
std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

double to_seconds(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    try {
      return std::stod(v.get<std::string>());
    } catch (const std::exception&) {
    }
  }
  return 0;
}

}  // namespace

std::string encode(std::string_view message, std::string_view callstack, int64_t timestamp) {
  nlohmann::ordered_json j;
  j["message"]["message"] = std::string(message);
  j["message"]["extraInfo"]["py_callstack"] = std::string(callstack);
  j["message"]["extraInfo"]["timestamp"] = std::to_string(timestamp);
  return dump(j);
}

Content parse(const std::string& text) {
  Content c;
  c.raw = text;
  try {
    json j = json::parse(c.raw);
    const json& m = j.at("message");
    if (m.is_object()) {
      c.message = m.value("message", "");
      if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
        const json& x = m["extraInfo"];
        c.traceback = x.value("py_callstack", "");
        if (x.contains("timestamp")) c.timestamp = to_seconds(x["timestamp"]);
      }
    } else if (m.is_string()) {
      c.message = m.get<std::string>();
      if (j.contains("timestamp")) c.timestamp = to_seconds(j["timestamp"]);
    } else {
      throw std::invalid_argument("'message' is neither a string nor an object");
    }
  } catch (const std::exception& e) {
    c.message = "unreadable error file (" + std::string(e.what()) + ")";
    c.traceback.clear();
    c.timestamp = 0;
  }
  return c;
}

std::string encode_for_parent(const Content* child, std::string_view message, int exit_code,
                              int64_t now) {
  if (child != nullptr) {
    try {
      json j = json::parse(child->raw);
      if (j.at("message").is_object()) {
        j["message"]["errorCode"] = exit_code;
        return dump(j);
      }
    } catch (const std::exception&) {
    }
  }
  json j{{"message",
          {{"message", std::string(message)},
           {"extraInfo", {{"timestamp", std::to_string(now)}}},
           {"errorCode", exit_code}}}};
  return dump(j);
}

}  // namespace cohort::error_file
