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

bool Hello::has(std::string_view feature) const {
  for (const auto& f : features)
    if (f == feature) return true;
  return false;
}

std::string encode_hello(const Hello& h) {
  std::string features;
  for (const auto& f : h.features) features += (features.empty() ? "" : ",") + f;
  std::string line = std::string(1, kHelloStart) + " " + std::to_string(h.version) + " " +
                     std::to_string(h.pid) + " " + (features.empty() ? "-" : features) + "\n";
  return line.size() > kMaxReportLine + 2 ? std::string() : line;
}

bool HeartbeatParser::feed(std::string_view bytes) {
  bool alive = false;
  for (char c : bytes) {
    if (line_kind_ != 0) {
      if (c == '\n') {
        alive = finish_line() || alive;
      } else if (line_.size() <= kMaxReportLine) {
        line_.push_back(c);  // one byte past the bound marks the line as too long
      }
      continue;
    }
    if (c == kReportStart || c == kModuleReportStart || c == kHelloStart) {
      line_kind_ = c;
      line_.clear();
    } else {
      alive = true;  // a beat: any other byte
      if (c != kModuleBeat) beaten_by_hand_ = true;
    }
  }
  return alive;
}

namespace {

std::optional<StepReport> parse_report(const std::string& text) {
  StepReport r;
  long long step = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), " %lld %lf %lf %lf%n", &step, &r.step_s, &r.items_per_s, &r.comm_s,
                  &used) != 4 ||
      static_cast<size_t>(used) != text.size() || step < 0 || r.step_s < 0 || r.items_per_s < 0 ||
      r.comm_s < 0)
    return std::nullopt;
  r.step = step;
  return r;
}

std::optional<Hello> parse_hello(const std::string& text) {
  Hello h;
  long long pid = 0;
  char features[kMaxReportLine + 1] = {};
  int used = 0;
  if (std::sscanf(text.c_str(), " %d %lld %160s%n", &h.version, &pid, features, &used) != 3 ||
      static_cast<size_t>(used) != text.size() || h.version < 1 || pid <= 0)
    return std::nullopt;
  h.pid = pid;
  const std::string list = features;
  if (list != "-") {
    size_t start = 0;
    for (;;) {
      const size_t comma = list.find(',', start);
      std::string f = list.substr(start, comma - start);
      if (f.empty()) return std::nullopt;
      h.features.push_back(std::move(f));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return h;
}

}  // namespace

bool HeartbeatParser::finish_line() {
  const char kind = line_kind_;
  line_kind_ = 0;
  bool report = false;
  if (line_.size() > kMaxReportLine) {
    ++malformed_;
  } else if (kind == kReportStart || kind == kModuleReportStart) {
    if (auto r = parse_report(line_)) {
      last_step_ = r;
      report = true;
      if (kind == kReportStart) beaten_by_hand_ = true;
    } else {
      ++malformed_;
    }
  } else if (auto h = parse_hello(line_)) {
    hello_ = std::move(h);
  } else {
    ++malformed_;
  }
  line_.clear();
  return report;
}

}  // namespace cohort::heartbeat_pipe
