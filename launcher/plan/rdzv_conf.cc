#include "plan/rdzv_conf.h"

#include <sstream>

#include "cohort/base/parse.h"
#include "cohort/error.h"

namespace cohort::launch {
namespace {

std::optional<bool> parse_bool(const std::string& v) {
  if (v == "1" || v == "true" || v == "True" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "False" || v == "no") return false;
  return std::nullopt;
}

}  // namespace

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf c;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) throw UsageError("--rdzv-conf: '" + item + "' is not key=value");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "store_type" || k == "heartbeat_timeout") continue;
    if (k == "is_host") {
      c.is_host = parse_bool(v);
      if (!c.is_host) throw UsageError("--rdzv-conf: is_host=" + v + " is not true or false");
      continue;
    }
    auto seconds = parse_seconds(v);
    if (!seconds) throw UsageError("--rdzv-conf: " + k + "=" + v + " is not a number >= 0");
    if (k == "join_timeout") {
      c.join_timeout = *seconds;
    } else if (k == "last_call_timeout") {
      c.last_call_timeout = *seconds;
    } else if (k == "close_timeout") {
      c.close_timeout = *seconds;
    } else if (k == "keep_alive_interval") {
      c.keep_alive_interval = std::max(*seconds, std::chrono::milliseconds(1));
    } else if (k == "keep_alive_max_attempt") {
      c.keep_alive_max_attempt = std::max(1, static_cast<int>(seconds->count() / 1000));
    } else if (k == "timeout" || k == "read_timeout") {
      c.node_info_timeout = *seconds;
    } else {
      throw UsageError("--rdzv-conf: unknown key '" + k +
                       "' (join_timeout, last_call_timeout, close_timeout, keep_alive_interval, "
                       "keep_alive_max_attempt, timeout, read_timeout, is_host, store_type)");
    }
  }
  return c;
}

}  // namespace cohort::launch
