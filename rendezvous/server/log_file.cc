#include "server/log_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "cohort/error.h"

namespace cohort::rdzv {
namespace {

constexpr size_t kReadBuffer = 1 << 20;
constexpr size_t kScanWindow = 1 << 20;
constexpr uint64_t kScanBudget = 256ull << 20;

IoError io_error(const std::string& what, const std::string& path) {
  const int err = errno;
  return IoError("store log " + path + ": " + what + ": " + std::strerror(err), err);
}

// pread(2) of up to `n` bytes at `at`, retried until that many or the end of the file; the count.
size_t pread_full(int fd, char* out, size_t n, uint64_t at, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw io_error("cannot read", path);
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw io_error("cannot write", path);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// The CRC of `len` bytes at `at`, read in pieces through `buf` (`cap` bytes).
uint32_t crc_of_range(int fd, uint64_t at, uint64_t len, char* buf, size_t cap,
                      const std::string& path) {
  uLong sum = ::crc32(0, nullptr, 0);
  while (len > 0) {
    const size_t n =
        pread_full(fd, buf, static_cast<size_t>(std::min<uint64_t>(len, cap)), at, path);
    if (n == 0) break;
    sum = ::crc32_z(sum, reinterpret_cast<const Bytef*>(buf), n);
    at += n;
    len -= n;
  }
  return static_cast<uint32_t>(sum);
}

// "20261204T201441Z": when the copy was made, readable and sortable.
std::string utc_stamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

}  // namespace

uint32_t log_crc(std::string_view s) {
  return static_cast<uint32_t>(::crc32_z(0, reinterpret_cast<const Bytef*>(s.data()), s.size()));
}

LogReader::LogReader(int fd, std::string path)
    : fd_(fd), path_(std::move(path)), buf_(new char[kReadBuffer]) {}

LogReader::~LogReader() = default;

size_t LogReader::fill() {
  begin_ = end_ = 0;
  for (;;) {
    ssize_t r = ::read(fd_, buf_.get(), kReadBuffer);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw io_error("cannot read", path_);
    end_ = static_cast<size_t>(r);
    return end_;
  }
}

bool LogReader::read(char* out, size_t n) {
  while (n > 0) {
    if (begin_ == end_) {
      if (n >= kReadBuffer) {  // a large record: straight into its destination
        ssize_t r = ::read(fd_, out, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw io_error("cannot read", path_);
        if (r == 0) return false;
        out += r;
        n -= static_cast<size_t>(r);
        continue;
      }
      if (fill() == 0) return false;
    }
    const size_t take = std::min(n, end_ - begin_);
    std::memcpy(out, buf_.get() + begin_, take);
    begin_ += take;
    out += take;
    n -= take;
  }
  return true;
}

bool valid_record_after(int fd, uint64_t size, uint64_t from, const std::string& path) {
  std::vector<char> window(kScanWindow);
  uint64_t window_at = 0;
  size_t window_len = 0;
  uint64_t spent = 0;
  for (uint64_t p = from; p + 8 < size; ++p) {
    if (p < window_at || p + 8 > window_at + window_len) {
      window_at = p;
      window_len = pread_full(fd, window.data(), kScanWindow, p, path);
      if (window_len < 8) return false;
    }
    const char* at = window.data() + (p - window_at);
    uint32_t len, sum;
    std::memcpy(&len, at, 4);
    std::memcpy(&sum, at + 4, 4);
    if (len == 0 || len > size - p - 8) continue;
    if ((spent += len) > kScanBudget) return true;
    uint32_t actual;
    if (p + 8 + len <= window_at + window_len) {
      actual = log_crc(std::string_view(at + 8, len));
    } else {
      char piece[64 << 10];
      actual = crc_of_range(fd, p + 8, len, piece, sizeof(piece), path);
    }
    if (actual == sum) return true;
  }
  return false;
}

void sync_directory(const std::string& dir) {
  int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) throw io_error("cannot open the directory", dir);
  const bool synced = ::fsync(d) == 0;
  const int err = errno;
  ::close(d);
  errno = err;
  if (!synced) throw io_error("cannot fsync the directory", dir);
}

std::string copy_aside_durably(int fd, uint64_t size, const std::string& path,
                               const std::string& dir) {
  const std::string base = path + ".damaged-" + utc_stamp();
  std::string copy;
  int out = -1;
  for (int n = 1; out < 0 && n <= 1000; ++n) {
    copy = n == 1 ? base : base + "-" + std::to_string(n);
    out = ::open(copy.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0 && errno != EEXIST) throw io_error("cannot create the copy", copy);
  }
  if (out < 0) throw io_error("cannot create the copy", base);
  try {
    std::vector<char> buf(kReadBuffer);
    for (uint64_t at = 0; at < size;) {
      const size_t n = pread_full(
          fd, buf.data(), static_cast<size_t>(std::min<uint64_t>(size - at, buf.size())), at, path);
      if (n == 0) break;
      write_all(out, buf.data(), n, copy);
      at += n;
    }
    if (::fsync(out) != 0) throw io_error("cannot fsync the copy", copy);
    ::close(out);
    out = -1;
    sync_directory(dir);
  } catch (...) {
    if (out >= 0) ::close(out);
    ::unlink(copy.c_str());
    throw;
  }
  return copy;
}

}  // namespace cohort::rdzv
