// libcohort's answers to cohortrun's hang probes (cohort/base/hang_probe.h): a thread that sleeps
// in read() on the control socket cohortrun handed over (COHORT_CONTROL_FD) until a question
// comes, and answers with every process group's collective progress (collective_progress.h).
// Native stacks are not part of the answer: cohortrun asks a libcohort culprit for its stack with
// SIGABRT when it stops the job (fatal_signal.cc prints it).
//
// Started once per process, by the first process group; it says hello on the heartbeat pipe
// ("probe": cohortrun then judges the worker's silence by probing the job). The thread is
// detached and touches only what lives until the process ends.
#pragma once

#include <string>
#include <vector>

namespace cohort::detail {

// Starts the server when COHORT_CONTROL_FD names a socket; once per process, from any thread.
void start_probe_server_once();

// Writes the hello line on the heartbeat pipe (cohort/base/heartbeat_line.h), with `features`;
// nothing without COHORT_HEARTBEAT_FD. Defined in heartbeat.cc, beside the process's writer.
void say_hello(const std::vector<std::string>& features);

}  // namespace cohort::detail
