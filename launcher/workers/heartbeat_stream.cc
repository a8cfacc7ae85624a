#include "workers/heartbeat_stream.h"

#include <cstdio>

namespace cohort::launch {
namespace {

constexpr size_t kMaxLine = 160;

}  // namespace

bool HeartbeatStream::feed(std::string_view bytes) {
  bool alive = false;
  for (char c : bytes) {
    if (in_line_) {
      if (c == '\n') {
        finish_line();
        alive = true;
      } else if (line_.size() <= kMaxLine) {
        line_.push_back(c);  // one byte past the bound marks the line as too long
      }
      continue;
    }
    if (c == 'S') {
      in_line_ = true;
      line_.clear();
    } else {
      alive = true;  // a beat (any other byte: older workers and the Python module write 'b')
    }
  }
  return alive;
}

void HeartbeatStream::finish_line() {
  in_line_ = false;
  StepReport r;
  long long step = 0;
  int used = 0;
  if (line_.size() <= kMaxLine &&
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

}  // namespace cohort::launch
