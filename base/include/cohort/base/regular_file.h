// Reading small files that a user names (a token, a credential): whole, bounded, and only when
// they are regular files, so that a path to a FIFO, a device or a huge file ends in an error that
// names it instead of a hang or an exhausted machine.
//
// Thread safety: free functions, safe from any thread.
#pragma once

#include <cstddef>
#include <string>

namespace cohort {

struct RegularFileLimits {
  size_t max_bytes = 64 * 1024;  // larger files are refused, unread
  // Whether a symbolic link (the last component) is followed to its target; the target is then
  // checked like the file itself. Mounted secrets (Kubernetes, Docker, systemd credentials) are
  // links to regular files.
  bool follow_links = true;
};

// Returns the contents of the regular file at `path`. Opens it without blocking (O_NONBLOCK: a
// FIFO's open would wait for a writer) and judges what was opened (fstat), not the path, so that
// nothing swapped in between is read. Throws UsageError naming `path` and `what` (for example
// "the token file") when it is not a regular file (a FIFO, a character device such as /dev/zero,
// a directory, a socket), is larger than limits.max_bytes, or is a link while links are not
// followed; IoError (with errno) when it cannot be opened or read.
std::string read_regular_file(const std::string& path, const std::string& what,
                              RegularFileLimits limits = {});

}  // namespace cohort
