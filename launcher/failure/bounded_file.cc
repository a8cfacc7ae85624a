#include "failure/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cohort::launch {
namespace {

using Status = BoundedFile::Status;

std::string kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "is a FIFO";
  if (S_ISCHR(mode)) return "is a character device";
  if (S_ISBLK(mode)) return "is a block device";
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISSOCK(mode)) return "is a socket";
  return "is not a regular file";
}

// The file opened and judged, with system calls only (write_bounded_file runs this after fork).
struct Opened {
  Status status = Status::kMissing;  // kRead: `fd` is a regular file of `size` bytes
  int fd = -1;
  int error = 0;    // kRefused: the errno of what failed, or 0 when it is the file's kind
  mode_t mode = 0;  // kRefused with error 0: the file's kind
  uint64_t size = 0;
};

Opened open_judged(const char* path) {
  Opened o;
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer; O_NOFOLLOW: a symbolic link
  // (to /dev/zero, to someone else's file) is refused, not followed.
  o.fd = ::open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (o.fd < 0) {
    if (errno != ENOENT) {
      o.status = Status::kRefused;
      o.error = errno;
    }
    return o;
  }
  struct stat st {};
  if (::fstat(o.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    o.status = Status::kRefused;
    o.error = S_ISREG(st.st_mode) ? errno : 0;
    o.mode = st.st_mode;
    ::close(o.fd);
    o.fd = -1;
    return o;
  }
  o.status = Status::kRead;
  o.size = static_cast<uint64_t>(st.st_size);
  return o;
}

std::string problem_of(int error, mode_t mode) {
  if (error == ELOOP) return "is a symbolic link";
  return error != 0 ? std::strerror(error) : kind_of(mode);
}

// Where the bytes worth reading start, and how many to ask for: at most the last `max_bytes`; of
// a smaller file one byte more than its size, to notice one that grew meanwhile.
uint64_t read_from(uint64_t size, size_t max_bytes) {
  return size > max_bytes ? size - max_bytes : 0;
}
size_t read_count(uint64_t size, size_t max_bytes) {
  return size > max_bytes ? max_bytes : static_cast<size_t>(size) + 1;
}

// Reads up to `n` bytes at `offset` into `sink(data, len)` (fewer at the end of the file, or when
// it shrank meanwhile). 0, or the errno of a failed read.
template <typename Sink>
int read_range(int fd, uint64_t offset, size_t n, char* buf, size_t buf_size, Sink&& sink) {
  size_t got = 0;
  while (got < n) {
    const size_t want = n - got < buf_size ? n - got : buf_size;
    const ssize_t r = ::pread(fd, buf, want, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) break;
    if (!sink(buf, static_cast<size_t>(r))) return EPIPE;
    got += static_cast<size_t>(r);
  }
  return 0;
}

// The last step of both readers: a file over the bound (then, or grown past it since) keeps its
// last `max_bytes` bytes.
void finish(BoundedFile* f, size_t max_bytes) {
  if (f->status != Status::kRead) return;
  if (f->size > max_bytes || f->text.size() > max_bytes) {
    if (f->text.size() > max_bytes) f->text.erase(0, f->text.size() - max_bytes);
    f->status = Status::kTooLarge;
  }
}

// What write_bounded_file() puts after the file's bytes (so that it can stream them first).
struct Trailer {
  uint64_t magic;
  uint32_t status;
  int32_t error;
  uint32_t mode;
  uint32_t unused;
  uint64_t size;
  uint64_t text_bytes;  // how many bytes came before the trailer
};
constexpr uint64_t kTrailerMagic = 0x636f686f72742d66;  // "cohort-f"

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

BoundedFile read_bounded_file(const std::string& path, size_t max_bytes) {
  BoundedFile f;
  Opened o = open_judged(path.c_str());
  f.status = o.status;
  f.size = o.size;
  if (o.status == Status::kRefused) f.problem = problem_of(o.error, o.mode);
  if (o.status != Status::kRead) return f;
  const size_t n = read_count(o.size, max_bytes);
  f.text.reserve(n);
  char buf[64 * 1024];
  const int err = read_range(o.fd, read_from(o.size, max_bytes), n, buf, sizeof buf,
                             [&](const char* p, size_t len) {
                               f.text.append(p, len);
                               return true;
                             });
  ::close(o.fd);
  if (err != 0) {
    f.status = Status::kRefused;
    f.problem = std::strerror(err);
    f.text.clear();
    return f;
  }
  finish(&f, max_bytes);
  return f;
}

bool write_bounded_file(const char* path, size_t max_bytes, int out) {
  Opened o = open_judged(path);
  Trailer t{};
  t.magic = kTrailerMagic;
  t.size = o.size;
  if (o.status == Status::kRead) {
    char buf[64 * 1024];
    bool written = true;
    const int err = read_range(o.fd, read_from(o.size, max_bytes), read_count(o.size, max_bytes),
                               buf, sizeof buf, [&](const char* p, size_t len) {
                                 written = write_all(out, p, len);
                                 t.text_bytes += len;
                                 return written;
                               });
    ::close(o.fd);
    if (!written) return false;
    if (err != 0) {
      o.status = Status::kRefused;
      o.error = err;
    }
  }
  t.status = static_cast<uint32_t>(o.status);
  t.error = o.error;
  t.mode = o.mode;
  return write_all(out, reinterpret_cast<const char*>(&t), sizeof t);
}

BoundedFile parse_written_bounded_file(std::string_view written, size_t max_bytes) {
  BoundedFile f;
  Trailer t{};
  if (written.size() >= sizeof t)
    std::memcpy(&t, written.data() + written.size() - sizeof t, sizeof t);
  if (written.size() < sizeof t || t.magic != kTrailerMagic ||
      t.text_bytes != written.size() - sizeof t ||
      t.status > static_cast<uint32_t>(Status::kRefused)) {
    f.status = Status::kRefused;
    f.problem = "could not be read (its reader ended before it finished)";
    return f;
  }
  f.status = static_cast<Status>(t.status);
  f.size = t.size;
  if (f.status == Status::kRefused) {
    f.problem = problem_of(t.error, static_cast<mode_t>(t.mode));
    return f;
  }
  f.text.assign(written.data(), t.text_bytes);
  finish(&f, max_bytes);
  return f;
}

}  // namespace cohort::launch
