// Error files in torchrun's format, so cohortrun's (and torchrun's) failure summary shows why a
// worker died: an uncaught exception or a fatal signal writes $TORCHELASTIC_ERROR_FILE as
//   {"message": {"message": "<Type>: <what>",
//                "extraInfo": {"py_callstack": "<stack trace>", "timestamp": "<int secs>"}}}
// (docs/TORCHRUN.md §3.5).
//
// Typical use, the whole of a worker's main():
//   int main(int argc, char** argv) { return cohort::run_main(argc, argv, real_main); }
//
// Thread safety: the functions are safe from any thread; the handlers serve every thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cohort {

// The error-file JSON for `message` (e.g. "cohort::CollectiveError: allreduce ...") with
// `callstack` and `timestamp` (seconds since the epoch).
std::string error_file_json(std::string_view message, std::string_view callstack,
                            int64_t timestamp);

// Writes error_file_json(message, callstack, now) to `path`, replacing it.
// Throws cohort::Error naming the path when it cannot be written.
void write_error_file(const std::string& path, std::string_view message,
                      std::string_view callstack);

// A symbolised (demangled where possible) stack trace of the calling thread, one frame a line,
// leaving out the innermost `skip` frames besides this function.
std::string current_stack_trace(int skip = 0);

// Installs handlers for SIGSEGV, SIGABRT, SIGBUS and SIGFPE (on an alternate stack for the calling
// thread) that write $TORCHELASTIC_ERROR_FILE ("Signal 11 (SIGSEGV) received by PID p" and the
// stack), print one line to stderr, remove shared-memory segments still being set up, and then die
// of the same signal. Everything the handler needs is prepared here: it only makes async-signal-
// safe calls. Idempotent; reads TORCHELASTIC_ERROR_FILE and RANK now.
void install_fatal_signal_handlers();

// Runs main_fn(argc, argv) with the fatal-signal handlers installed and returns what it returns.
// An exception that escapes main_fn (or any thread) ends the process with exit status 1, after
// writing $TORCHELASTIC_ERROR_FILE ("<Type>: <what>" and the stack *where it was thrown*: the
// handler runs from std::terminate before anything unwinds) and printing one line to stderr.
// REQUIRES: nothing up the stack catches the exception (call run_main from main()).
int run_main(int argc, char** argv, int (*main_fn)(int, char**));

}  // namespace cohort
