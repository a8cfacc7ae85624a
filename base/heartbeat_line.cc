#include "cohort/base/heartbeat_line.h"

#include <cstdio>

namespace cohort::heartbeat_pipe {

std::string encode_step_report(const StepReport& r) {
  char line[kMaxReportLine + 2];
  const int n = std::snprintf(line, sizeof line, "%c %lld %.6g %.6g %.6g\n", kReportStart,
                              static_cast<long long>(r.step), r.step_s, r.items_per_s, r.comm_s);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof line) return {};
  return std::string(line, static_cast<size_t>(n));
}

bool HeartbeatParser::feed(std::string_view bytes) {
  bool alive = false;
  for (char c : bytes) {
    if (in_line_) {
      if (c == '\n') {
        finish_line();
        alive = true;
      } else if (line_.size() <= kMaxReportLine) {
        line_.push_back(c);  // one byte past the bound marks the line as too long
      }
      continue;
    }
    if (c == kReportStart) {
      in_line_ = true;
      line_.clear();
    } else {
      alive = true;  // a beat: any other byte
    }
  }
  return alive;
}

void HeartbeatParser::finish_line() {
  in_line_ = false;
  StepReport r;
  long long step = 0;
  int used = 0;
  if (line_.size() <= kMaxReportLine &&
      std::sscanf(line_.c_str(), " %lld %lf %lf %lf%n", &step, &r.step_s, &r.items_per_s, &r.comm_s,
                  &used) == 4 &&
      static_cast<size_t>(used) == line_.size() && step >= 0 && r.step_s >= 0 &&
      r.items_per_s >= 0 && r.comm_s >= 0) {
    r.step = step;
    last_step_ = r;
  } else {
    ++malformed_;
  }
  line_.clear();
}

}  // namespace cohort::heartbeat_pipe
