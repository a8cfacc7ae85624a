#include "failure/error_file.h"
#include "cohort/error.h"
#include "failure/json_text.h"

#include <unistd.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace cohort::launch {
namespace {

using nlohmann::json;

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

std::optional<ErrorFileContent> read_error_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_error_file(ss.str());
}

ErrorFileContent parse_error_file(const std::string& text) {
  ErrorFileContent c;
  c.raw = text;
  try {
    json j = json::parse(c.raw);
    const json& m = j.at("message");
    if (m.is_object()) {
      // {"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}
      c.message = m.value("message", "");
      if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
        const json& x = m["extraInfo"];
        c.traceback = x.value("py_callstack", "");
        if (x.contains("timestamp")) c.timestamp = to_seconds(x["timestamp"]);
      }
    } else if (m.is_string()) {
      // {"message": "<str>", "timestamp": <int>}
      c.message = m.get<std::string>();
      if (j.contains("timestamp")) c.timestamp = to_seconds(j["timestamp"]);
    } else {
      throw ProtocolError("'message' is neither a string nor an object");
    }
  } catch (const std::exception& e) {
    c.message = "unreadable error file (" + std::string(e.what()) + ")";
    c.traceback.clear();
    c.timestamp = 0;
  }
  return c;
}

void write_parent_error_file(const std::string& path, const std::optional<ErrorFileContent>& child,
                             const std::string& message, int exit_code) {
  json j;
  bool copied = false;
  if (child) {
    try {
      j = json::parse(child->raw);
      if (j.at("message").is_object()) {
        j["message"]["errorCode"] = exit_code;
        copied = true;
      }
    } catch (const std::exception&) {
    }
  }
  if (!copied) {
    j = json{{"message",
              {{"message", message},
               {"extraInfo", {{"timestamp", std::to_string(std::time(nullptr))}}},
               {"errorCode", exit_code}}}};
  }
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << json_text(j);
    if (!out.flush()) return;
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace cohort::launch
