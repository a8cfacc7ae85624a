// torchrun's error files, on the launcher's side: reading what a worker wrote to
// $TORCHELASTIC_ERROR_FILE, and writing the launcher's own copy for whoever launched cohortrun.
// The format itself is the contract in cohort/base/error_file_format.h, shared with the writer.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "cohort/base/error_file_format.h"

namespace cohort::launch {

using ErrorFileContent = error_file::Content;

// Parses the text of an error file (error_file::parse): a content whose message names the problem
// when it is not in either of torchrun's two formats. Never throws.
inline ErrorFileContent parse_error_file(const std::string& text) {
  return error_file::parse(text);
}

// The most of an error file that is read: a traceback is kilobytes; a larger file is read from
// its end (and then not parsed).
inline constexpr size_t kMaxErrorFileBytes = 1 << 20;

struct BoundedFile;

// Reads `path`, a file the worker controls: a regular file only, never through a symbolic link,
// at most kMaxErrorFileBytes, never waiting for a FIFO's writer (read_bounded_file). nullopt when
// it does not exist; else a content whose message names the problem when it is refused, too
// large, or in neither of torchrun's two formats. Can still block where the file system does: on
// an event loop, use ErrorFileReader (error_file_reader.h).
std::optional<ErrorFileContent> read_error_file(const std::string& path);

// What read_error_file() makes of a file read (bounded_file.h): nullopt when it is missing, else
// its content, or a message naming why it was not read.
std::optional<ErrorFileContent> error_file_content(BoundedFile f);

// Writes (atomically) an error file at `path` for a launcher's launcher: the root cause's own
// file with message.errorCode set, or a minimal one built from `message`.
void write_parent_error_file(const std::string& path, const std::optional<ErrorFileContent>& child,
                             const std::string& message, int exit_code);

}  // namespace cohort::launch
