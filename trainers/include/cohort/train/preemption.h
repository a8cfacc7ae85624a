// Checkpoints on request: SIGUSR1 (Slurm's warning before a time limit or a preemption, passed on
// by cohortrun without stopping the job) asks the trainer to write a checkpoint at its next step.
#pragma once

#include <cstdint>

namespace cohort::train {

// Installs the SIGUSR1 handler (it only sets a flag). Safe to call more than once.
void install_checkpoint_signal();

// True once per SIGUSR1 received since the last call.
bool take_checkpoint_request();

// Whether to write a checkpoint after optimiser step `step` (counted from 1): kRequested when a
// SIGUSR1 came since the last call and there is a checkpoint directory, kScheduled every `every`
// steps (0: never), else kNone. Takes the pending request.
enum class CheckpointDue { kNone, kScheduled, kRequested };
CheckpointDue checkpoint_due(int64_t step, int64_t every, bool have_checkpoint_dir);

}  // namespace cohort::train
