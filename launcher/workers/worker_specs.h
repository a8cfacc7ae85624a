// What each worker of a round is started with: its command, environment, log files, and where its
// output goes (GroupSpec for WorkerGroup), from the plan, the round's assignment and the console.
//
// Output follows torchrun: -r/--redirects sends a stream to <attempt>/<rank>/stdout.log or
// stderr.log; -t/--tee also copies it to the console with the log-line prefix;
// --local-ranks-filter keeps other ranks off the console. A stream that only goes to the console
// is the worker's own: it inherits cohortrun's terminal (or pipe) as under torchrun. stderr is
// always read (its tail explains a failure); when it, or a prefixed stream, is shown on a
// terminal, the worker writes to a pseudo-terminal, so that isatty(), colours and '\r' progress
// bars behave as they would on the terminal itself.
#pragma once

#include <string>

#include "cohort/base/net.h"
#include "failure/failure.h"
#include "plan/job_plan.h"
#include "rdzv/round_types.h"
#include "workers/worker_group.h"

namespace cohort::launch {

class ConsoleStream;

// torchrun's log-line prefix: `templ` with ${role_name}, ${local_rank}, ${rank} and ${hostname}
// replaced ("" = "[${role_name}${local_rank}]:").
std::string render_prefix(const std::string& templ, const std::string& role, int local_rank,
                          int rank, const std::string& host);

// The round's workers. `store`: MASTER_ADDR:MASTER_PORT. `previous`: how the round before ended,
// told to the workers of a restart (COHORT_RESTART_REASON, _RANK, _HOST). Throws IoError when the
// attempt's folder or its filtered logs cannot be created.
GroupSpec make_group_spec(const JobPlan& plan, const EnvMap& env, const RankAssignment& a,
                          const HostPort& store, const std::string& agent_id,
                          const std::optional<Outcome>& previous, ConsoleStream& out,
                          ConsoleStream& err);

// The restart variables for `previous` (none when there was no earlier round).
std::vector<std::pair<std::string, std::string>> restart_reason_env(
    const std::optional<Outcome>& previous);

}  // namespace cohort::launch
