// The heartbeat pipe's contract, between a worker (libcohort's cohort/heartbeat.h, and cohortrun's
// Python worker module python/_cohort_worker/heartbeat.py, which writes the same bytes) and
// cohortrun, which reads it.
//
// The worker writes to the descriptor named by COHORT_HEARTBEAT_FD (worker_env_names.h):
//   - a beat: any single byte other than 'S', 'A' and 'H'. The worker's own code writes 'b'
//     (libcohort, cohort.beat(), a script writing to the pipe); cohortrun's Python worker module
//     writes 'a' for the beats it makes by itself, on an optimizer step;
//   - a step report, one line: "S <step> <step_s> <items_per_s> <comm_s>\n" with <step> a
//     non-negative integer and the rest non-negative decimals (printf's %.6g). A report is also a
//     beat. "A ..." is the same report made by the worker module by itself (its optimizer hook).
//   Beats by hand ('b', "S") are a promise: the worker beats through every phase, so its silence
//   alone may judge it hung when it has no collective to be judged by (launcher/failure/
//   hang_analysis.h). The module's beats ('a', "A") promise nothing of the kind: an evaluation
//   without optimizer steps is silent.
//   - hello, one line: "H <version> <pid> <features>\n", written once by the process that took
//     the worker's descriptors (the worker itself, or a process a fork server forked for it):
//     <version> kHelloVersion, <pid> that process, <features> a comma-separated list ("-" when
//     empty): "probe" when it answers hang probes on COHORT_CONTROL_FD. Hello is no beat: a
//     worker that never beats is still never judged by beats.
// A line runs at most kMaxReportLine bytes after its first byte, and goes out in one write()
// (under PIPE_BUF), so that lines never interleave.
//
// Thread safety: the encoders are pure; a HeartbeatParser belongs to one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::heartbeat_pipe {

// The byte a beat by hand writes.
inline constexpr char kBeat = 'b';
// The byte the worker module writes for a beat of its own (an optimizer step).
inline constexpr char kModuleBeat = 'a';
// The byte that starts a step report by hand.
inline constexpr char kReportStart = 'S';
// The byte that starts a step report the worker module made by itself.
inline constexpr char kModuleReportStart = 'A';
// The byte that starts a hello.
inline constexpr char kHelloStart = 'H';
// A line longer than this (after its first byte) is malformed.
inline constexpr size_t kMaxReportLine = 160;
inline constexpr int kHelloVersion = 1;
// The feature of a worker that answers hang probes on its control socket.
inline constexpr const char* kProbeFeature = "probe";

// What a worker says of its recent steps: the last step's number, and the means since the
// previous report of a step's seconds, the items (samples, tokens) per second, and the seconds of
// a step spent in communication.
struct StepReport {
  int64_t step = 0;
  double step_s = 0;
  double items_per_s = 0;
  double comm_s = 0;
};

// Which process holds a worker's descriptors, and what it offers.
struct Hello {
  int version = kHelloVersion;
  int64_t pid = 0;
  std::vector<std::string> features;

  bool has(std::string_view feature) const;
};

// The line a worker writes for `r`, "S <step> <step_s> <items_per_s> <comm_s>\n".
std::string encode_step_report(const StepReport& r);
// "H <version> <pid> <features>\n"; "" when it would not fit a line (too many features).
std::string encode_hello(const Hello& h);

// Reads what a worker wrote, in whatever pieces read() returned: a report cut between two reads
// is put back together. A line that does not parse, or runs past kMaxReportLine, is dropped whole
// and counted; the beats around it still count.
class HeartbeatParser {
 public:
  // Consumes `bytes`; returns true when they held at least one beat or report.
  bool feed(std::string_view bytes);
  // The last report that parsed, if any.
  const std::optional<StepReport>& last_step() const { return last_step_; }
  // The last hello that parsed, if any.
  const std::optional<Hello>& hello() const { return hello_; }
  // Whether a beat or a report by hand came (anything but the worker module's own, 'a' and "A").
  bool beaten_by_hand() const { return beaten_by_hand_; }
  // How many lines were dropped.
  uint64_t malformed() const { return malformed_; }

 private:
  // Returns true for a report (a beat), false for a hello or a malformed line.
  bool finish_line();

  std::optional<StepReport> last_step_;
  std::optional<Hello> hello_;
  std::string line_;    // a line being read, after its first byte
  char line_kind_ = 0;  // its first byte; 0: not in a line
  uint64_t malformed_ = 0;
  bool beaten_by_hand_ = false;
};

}  // namespace cohort::heartbeat_pipe
