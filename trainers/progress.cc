#include "cohort/train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace cohort::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

bool Progress::is_terminal(std::FILE* f) {
  return f && ::isatty(::fileno(f)) == 1;
}

Progress::Progress(std::FILE* out, bool enabled, bool tty, std::string unit, int log_every)
    : out_(out),
      enabled_(enabled && out),
      tty_(tty),
      unit_(std::move(unit)),
      log_every_(log_every > 0 ? log_every : 1) {}

Progress::~Progress() {
  finish();
}

void Progress::step(int64_t step, int64_t total, double loss, double rate, double lr) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    first_step_ = step - 1;
    start_ = now;
  }
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double per_step =
      step > first_step_ ? elapsed / static_cast<double>(step - first_step_) : 0;
  const double eta = total > 0 ? per_step * static_cast<double>(total - step) : -1;
  char stats[160];
  std::snprintf(stats, sizeof stats, "loss %.4f  %.0f %s  lr %.3g", loss, rate, unit_.c_str(), lr);
  if (tty_) {
    const bool last = total > 0 && step >= total;
    if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    std::string bar;
    if (total > 0) {
      const int filled =
          std::min(kWidth, static_cast<int>(kWidth * static_cast<double>(step) / total));
      bar.push_back('[');
      bar.append(static_cast<size_t>(filled), '#');
      bar.append(static_cast<size_t>(kWidth - filled), '.');
      bar.append("] ");
    }
    std::fprintf(out_, "\r\033[K%s%lld/%lld  %s  ETA %s", bar.c_str(), static_cast<long long>(step),
                 static_cast<long long>(total), stats, format_duration(eta).c_str());
    std::fflush(out_);
    bar_drawn_ = true;
  } else if (step % log_every_ == 0 || (total > 0 && step == total)) {
    if (total > 0) {
      std::fprintf(out_, "step %lld/%lld  %s  ETA %s\n", static_cast<long long>(step),
                   static_cast<long long>(total), stats, format_duration(eta).c_str());
    } else {
      std::fprintf(out_, "step %lld  %s\n", static_cast<long long>(step), stats);
    }
    std::fflush(out_);
  }
}

void Progress::log(const std::string& line) {
  if (!enabled_) return;
  if (bar_drawn_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  last_draw_ = {};  // redraw the bar at the next step
}

void Progress::finish() {
  if (!enabled_ || !bar_drawn_) return;
  std::fputs("\n", out_);
  std::fflush(out_);
  bar_drawn_ = false;
}

}  // namespace cohort::train
