// Files a crashing process must remove: shared-memory segments between their creation and the
// moment every peer has mapped them (after which they are already unlinked). The fatal-signal
// handler and the terminate handler call run_crash_cleanup(); the registry is a fixed array, so
// that path allocates nothing and only calls unlink().
//
// Thread safety: all functions are safe from any thread; run_crash_cleanup() is also
// async-signal-safe.
#pragma once

#include <string_view>

namespace cohort::detail {

// Registers `path` (an absolute path such as "/dev/shm/cohort-...") for removal on a crash.
// Returns a handle for unregister_crash_file(), or -1 when the registry is full or the path too
// long (the segment is then only swept by the next attempt).
int register_crash_file(std::string_view path) noexcept;

// Forgets a handle from register_crash_file(); -1 is ignored.
void unregister_crash_file(int handle) noexcept;

// unlink()s every registered path. Async-signal-safe.
void run_crash_cleanup() noexcept;

}  // namespace cohort::detail
