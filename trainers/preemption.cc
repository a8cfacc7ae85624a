#include "cohort/train/preemption.h"

#include <signal.h>

#include <atomic>

namespace cohort::train {
namespace {

std::atomic<bool> g_requested{false};

void on_signal(int) {
  g_requested.store(true);
}

}  // namespace

void install_checkpoint_signal() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

bool take_checkpoint_request() {
  return g_requested.exchange(false);
}

CheckpointDue checkpoint_due(int64_t step, int64_t every, bool have_checkpoint_dir) {
  if (take_checkpoint_request() && have_checkpoint_dir) return CheckpointDue::kRequested;
  if (every > 0 && step % every == 0) return CheckpointDue::kScheduled;
  return CheckpointDue::kNone;
}

}  // namespace cohort::train
