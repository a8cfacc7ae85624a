#include "observe/hang_status.h"

#include <nlohmann/json.hpp>

#include "cohort/base/json_number.h"
#include "cohort/error.h"

namespace cohort::launch {

using nlohmann::json;

std::string to_json(const HangStatus& s) {
  json culprits = json::array();
  for (size_t i = 0; i < s.report.culprits.size(); ++i) {
    const HangCulprit& c = s.report.culprits[i];
    culprits.push_back({{"rank", c.rank},
                        {"host", i < s.culprit_hosts.size() ? s.culprit_hosts[i] : ""},
                        {"reason", c.reason},
                        {"stack", c.stack}});
  }
  json j = {{"probe", s.probe},
            {"at", s.at},
            {"verdict", verdict_name(s.report.verdict)},
            {"summary", s.report.summary},
            {"culprits", std::move(culprits)},
            {"waiting", s.report.waiting},
            {"hung_for_s", s.report.hung_for_s}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

HangStatus hang_status_from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    HangStatus s;
    s.probe = json_number::field<int64_t>(j, "probe", 0);
    s.at = j.value("at", 0.0);
    const std::string v = j.value("verdict", "");
    for (auto k : {HangReport::Verdict::kProgressing, HangReport::Verdict::kQuiet,
                   HangReport::Verdict::kWaiting, HangReport::Verdict::kHung})
      if (verdict_name(k) == v) s.report.verdict = k;
    s.report.summary = j.value("summary", "");
    s.report.hung_for_s = j.value("hung_for_s", 0.0);
    for (const auto& c : j.value("culprits", json::array())) {
      s.report.culprits.push_back(
          {json_number::field<int>(c, "rank", 0), c.value("reason", ""), c.value("stack", "")});
      s.culprit_hosts.push_back(c.value("host", ""));
    }
    s.report.waiting = j.value("waiting", std::vector<std::string>{});
    return s;
  } catch (const std::exception& e) {
    throw ProtocolError(std::string("a hang report is malformed: ") + e.what());
  }
}

}  // namespace cohort::launch
