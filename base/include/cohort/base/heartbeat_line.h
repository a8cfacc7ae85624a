// The heartbeat pipe's contract, between a worker (libcohort's cohort/heartbeat.h, and the Python
// module python/cohort/_heartbeat.py, which writes the same bytes) and cohortrun, which reads it.
//
// The worker writes to the descriptor named by COHORT_HEARTBEAT_FD (worker_env_names.h):
//   - a beat: any single byte other than 'S' (libcohort and the Python module write 'b');
//   - a step report, one line: "S <step> <step_s> <items_per_s> <comm_s>\n" with <step> a
//     non-negative integer and the rest non-negative decimals (printf's %.6g), at most
//     kMaxReportLine bytes after the 'S'. A report is also a beat.
//
// Thread safety: encode_step_report is pure; a HeartbeatParser belongs to one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cohort::heartbeat_pipe {

// The byte a beat writes.
inline constexpr char kBeat = 'b';
// The byte that starts a step report.
inline constexpr char kReportStart = 'S';
// A report line longer than this (after its 'S') is malformed.
inline constexpr size_t kMaxReportLine = 160;

// What a worker says of its recent steps: the last step's number, and the means since the
// previous report of a step's seconds, the items (samples, tokens) per second, and the seconds of
// a step spent in communication.
struct StepReport {
  int64_t step = 0;
  double step_s = 0;
  double items_per_s = 0;
  double comm_s = 0;
};

// The line a worker writes for `r`, "S <step> <step_s> <items_per_s> <comm_s>\n".
std::string encode_step_report(const StepReport& r);

// Reads what a worker wrote, in whatever pieces read() returned: a report cut between two reads
// is put back together. A line that does not parse, or runs past kMaxReportLine, is dropped whole
// and counted; the beats around it still count.
class HeartbeatParser {
 public:
  // Consumes `bytes`; returns true when they held at least one beat or report.
  bool feed(std::string_view bytes);
  // The last report that parsed, if any.
  const std::optional<StepReport>& last_step() const { return last_step_; }
  // How many report lines were dropped.
  uint64_t malformed() const { return malformed_; }

 private:
  void finish_line();

  std::optional<StepReport> last_step_;
  std::string line_;  // a report being read
  bool in_line_ = false;
  uint64_t malformed_ = 0;
};

}  // namespace cohort::heartbeat_pipe
