// Reading a file that someone else controls (a worker's error file) without trusting it: only a
// regular file, not through a symbolic link, never more than a bound, never blocking on a FIFO or
// a device. A read can still block where the file system does (a hung NFS mount): callers on an
// event loop run it off the loop (error_file_reader.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::launch {

struct BoundedFile {
  enum class Status {
    kRead,      // `text` is the whole file
    kMissing,   // no such file
    kTooLarge,  // over the bound: `text` is its last `max_bytes` bytes, `size` its size
    kRefused,   // not a regular file, a symbolic link, or unreadable: `problem` says which
  };
  Status status = Status::kMissing;
  std::string text;
  uint64_t size = 0;
  std::string problem;  // "is a FIFO", "is a symbolic link", "Permission denied"
};

// Reads `path`, opened with O_NOFOLLOW | O_NONBLOCK. Never throws.
BoundedFile read_bounded_file(const std::string& path, size_t max_bytes);

}  // namespace cohort::launch
