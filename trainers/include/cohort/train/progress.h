// What a person sees while a trainer runs (rank 0 only; other ranks pass enabled = false).
//
// On a terminal: one progress bar redrawn in place, at most ten times a second,
//   [#########...........]  412/938  loss 0.4123  4,812 samples/s  ETA 0:11
// and log lines printed above it. Off a terminal (a pipe, a file, a launcher's log): plain lines,
// one every `log_every` steps, and the log lines.
//
// Thread safety: none.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace cohort::train {

class Progress {
 public:
  // `out` must outlive the Progress (nullptr: silent). `unit` names the throughput ("samples/s").
  // `tty` says whether to draw a bar; pass is_terminal(out).
  Progress(std::FILE* out, bool enabled, bool tty, std::string unit, int log_every);
  ~Progress();

  // Step `step` of `total` (total <= 0: unknown) finished with this loss and throughput.
  void step(int64_t step, int64_t total, double loss, double rate, double lr);
  // Prints one line (above the bar on a terminal).
  void log(const std::string& line);
  // Ends the bar's line.
  void finish();

  static bool is_terminal(std::FILE* f);

 private:
  std::FILE* out_;
  bool enabled_, tty_;
  std::string unit_;
  int log_every_;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t first_step_ = -1;
};

// "1:02:03" / "2:03".
std::string format_duration(double seconds);

}  // namespace cohort::train
