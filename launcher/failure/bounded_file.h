// Reading a file that someone else controls (a worker's error file) without trusting it: only a
// regular file, not through a symbolic link, never more than a bound, never blocking on a FIFO or
// a device. A read can still block where the file system does (a hung NFS or FUSE mount), where
// a thread cannot be woken, nor its process end: callers on an event loop read in a child process
// (write_bounded_file, error_file_reader.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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

// read_bounded_file() for a child process of a multi-threaded program (after fork, where only
// system calls are safe): reads `path` the same way and writes what it found to descriptor `out`
// (a pipe), framed for parse_written_bounded_file(). Allocates nothing, takes no lock. False when
// `out` would not take it all.
bool write_bounded_file(const char* path, size_t max_bytes, int out);

// What write_bounded_file(path, max_bytes, ...) wrote, all of it (to the end of the pipe): the
// BoundedFile that read_bounded_file() returns; kRefused when the bytes are not all there (the
// writer died or was killed on its way).
BoundedFile parse_written_bounded_file(std::string_view written, size_t max_bytes);

}  // namespace cohort::launch
