#include "cohort/base/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/error.h"

namespace cohort {
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string read_regular_file(const std::string& path, const std::string& what,
                              RegularFileLimits limits) {
  const std::string named = what + " " + path;
  int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  if (!limits.follow_links) flags |= O_NOFOLLOW;
  Fd fd(::open(path.c_str(), flags));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ELOOP && !limits.follow_links)
      throw UsageError(named + " is a symbolic link: give the file itself");
    throw IoError("cannot open " + named + ": " + std::strerror(err), err);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    const int err = errno;
    throw IoError("cannot examine " + named + ": " + std::strerror(err), err);
  }
  if (!S_ISREG(st.st_mode))
    throw UsageError(named + " is " + kind_of(st.st_mode) + ", not a regular file");
  const auto too_large = [&](uint64_t size) {
    return UsageError(named + " is " + std::to_string(size) + " bytes; at most " +
                      std::to_string(limits.max_bytes) + " are read");
  };
  if (static_cast<uint64_t>(st.st_size) > limits.max_bytes) throw too_large(st.st_size);
  // A regular file never blocks; the size is checked again while reading, since it may grow.
  std::string out(limits.max_bytes + 1, '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      throw IoError("cannot read " + named + ": " + std::strerror(err), err);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > limits.max_bytes) throw too_large(got);
  out.resize(got);
  return out;
}

}  // namespace cohort
