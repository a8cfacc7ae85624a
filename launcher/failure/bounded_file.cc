#include "failure/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cohort::launch {
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "is a FIFO";
  if (S_ISCHR(mode)) return "is a character device";
  if (S_ISBLK(mode)) return "is a block device";
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISSOCK(mode)) return "is a socket";
  return "is not a regular file";
}

// Reads up to `n` bytes at `offset` (fewer at the end of the file, or when it shrank meanwhile).
bool read_at(int fd, uint64_t offset, size_t n, std::string* out) {
  out->resize(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out->data() + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out->resize(got);
  return true;
}

}  // namespace

BoundedFile read_bounded_file(const std::string& path, size_t max_bytes) {
  BoundedFile f;
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer; O_NOFOLLOW: a symbolic link
  // (to /dev/zero, to someone else's file) is refused, not followed.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return f;
    f.status = BoundedFile::Status::kRefused;
    f.problem = errno == ELOOP ? "is a symbolic link" : std::strerror(errno);
    return f;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    f.status = BoundedFile::Status::kRefused;
    f.problem = S_ISREG(st.st_mode) ? std::strerror(errno) : kind_of(st.st_mode);
    ::close(fd);
    return f;
  }
  f.size = static_cast<uint64_t>(st.st_size);
  const bool too_large = f.size > max_bytes;
  const uint64_t from = too_large ? f.size - max_bytes : 0;
  if (!read_at(fd, from, too_large ? max_bytes : static_cast<size_t>(f.size) + 1, &f.text)) {
    f.status = BoundedFile::Status::kRefused;
    f.problem = std::strerror(errno);
  } else if (too_large || f.text.size() > max_bytes) {
    // It grew past the bound between fstat and the read.
    if (f.text.size() > max_bytes) f.text.erase(0, f.text.size() - max_bytes);
    f.status = BoundedFile::Status::kTooLarge;
  } else {
    f.status = BoundedFile::Status::kRead;
  }
  ::close(fd);
  return f;
}

}  // namespace cohort::launch
