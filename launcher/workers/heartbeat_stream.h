// HeartbeatStream: reads what a worker writes on its heartbeat pipe (worker_runtime's
// cohort/heartbeat.h): single beat bytes, and step report lines "S <step> <step_s> <items_per_s>
// <comm_s>\n". Bytes arrive in whatever pieces read() returns; a report cut between two reads is
// put back together. A line that does not parse, or runs past 160 bytes, is dropped whole and
// counted; the beats around it still count.
//
// Thread safety: none; the loop's thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cohort::launch {

struct StepReport {
  int64_t step = 0;
  double step_s = 0;
  double items_per_s = 0;
  double comm_s = 0;
};

class HeartbeatStream {
 public:
  // Consumes `bytes`; returns true when they held at least one beat or report.
  bool feed(std::string_view bytes);
  // The last report that parsed, if any.
  const std::optional<StepReport>& last_step() const { return last_step_; }
  uint64_t malformed() const { return malformed_; }

 private:
  void finish_line();
  std::optional<StepReport> last_step_;
  std::string line_;  // a report being read
  bool in_line_ = false;
  uint64_t malformed_ = 0;
};

}  // namespace cohort::launch
