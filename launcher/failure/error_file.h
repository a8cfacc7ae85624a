// torchrun's error files: reading what a worker wrote to $TORCHELASTIC_ERROR_FILE, and writing
// the launcher's own copy for whoever launched cohortrun (docs/TORCHRUN.md §3.5).
#pragma once

#include <optional>
#include <string>

namespace cohort::launch {

struct ErrorFileContent {
  std::string message;    // "ValueError: boom"
  std::string traceback;  // py_callstack, or the C++ stack the runtime wrote
  double timestamp = 0;   // seconds since the epoch; 0 when absent
  std::string raw;        // the file as read
};

// Parses the text of an error file; a content whose message names the problem when it is not in
// either of torchrun's two formats. Never throws.
ErrorFileContent parse_error_file(const std::string& text);

// Reads `path`. nullopt when it does not exist; a content whose message names the problem when
// it exists but is not in either of torchrun's two formats.
std::optional<ErrorFileContent> read_error_file(const std::string& path);

// Writes (atomically) an error file at `path` for a launcher's launcher: the root cause's own
// file with message.errorCode set, or a minimal one built from `message`.
void write_parent_error_file(const std::string& path, const std::optional<ErrorFileContent>& child,
                             const std::string& message, int exit_code);

}  // namespace cohort::launch
