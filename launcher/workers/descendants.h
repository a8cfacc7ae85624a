// Escaped descendants: what a worker started that left its process group (setsid, a double
// fork) and would outlive the job. cohortrun makes itself the child subreaper of everything it
// starts (PR_SET_CHILD_SUBREAPER), so such processes come back to it as children when their
// parents die; once a group's workers are gone, kill_stray_children() kills them, until none is
// left. Zombies of strays are reaped as they appear.
//
// Stray: a child of this process that is neither a running worker nor the reaper (`keep`).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <set>

namespace cohort::launch {

// PR_SET_CHILD_SUBREAPER for this process; false when the kernel refuses.
bool become_child_subreaper();

// SIGKILLs every stray child (and its process group), reaps it, and repeats for the strays that
// their deaths hand over, until none is left or `timeout` passes (one that SIGKILL cannot end
// yet, asleep in a hung mount, is left then). Returns how many were killed.
int kill_stray_children(const std::set<pid_t>& keep, std::chrono::milliseconds timeout);

// Reaps the stray children that have exited (on SIGCHLD); never touches `keep`.
void reap_stray_zombies(const std::set<pid_t>& keep);

}  // namespace cohort::launch
