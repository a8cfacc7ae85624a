// Checkpoints on request: SIGUSR1 (Slurm's warning before a time limit or a preemption, passed on
// by cohortrun without stopping the job) asks the trainer to write a checkpoint at its next step.
#pragma once

namespace cohort::train {

// Installs the SIGUSR1 handler (it only sets a flag). Safe to call more than once.
void install_checkpoint_signal();

// True once per SIGUSR1 received since the last call.
bool take_checkpoint_request();

}  // namespace cohort::train
