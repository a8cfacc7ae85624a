// The error file's contract, between a dying worker (libcohort's cohort/error_file.h writes it;
// PyTorch's @record does the same) and cohortrun, which reads it for the failure summary and
// copies it for whoever launched cohortrun. The file is named by TORCHELASTIC_ERROR_FILE
// (worker_env_names.h) and holds one JSON object in either of torchrun's two formats
// (docs/TORCHRUN.md §3.5):
//   {"message": {"message": "<Type>: <what>",
//                "extraInfo": {"py_callstack": "<stack>", "timestamp": "<int seconds>"}}}
//   {"message": "<text>", "timestamp": <int seconds>}
// The first is what cohort writes.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cohort::error_file {

// An error file's content, as read.
struct Content {
  std::string message;    // "ValueError: boom"
  std::string traceback;  // py_callstack, or the C++ stack the runtime wrote
  double timestamp = 0;   // seconds since the epoch; 0 when absent
  std::string raw;        // the text as read
};

// The text of an error file (the first format) for `message`, with `callstack` and `timestamp`
// (seconds since the epoch). Invalid UTF-8 in either string becomes U+FFFD.
std::string encode(std::string_view message, std::string_view callstack, int64_t timestamp);

// Parses an error file's text. When it is in neither format, the content's message names the
// problem ("unreadable error file (...)") and its traceback is empty. Never throws.
Content parse(const std::string& text);

// The copy of `child` (an error file's content) that a launcher leaves for its own launcher, with
// message.errorCode set to `exit_code`; when `child` is not in the first format, a file of the
// first format built from `message`. `now` is the timestamp of a file built from `message`.
std::string encode_for_parent(const Content* child, std::string_view message, int exit_code,
                              int64_t now);

}  // namespace cohort::error_file
