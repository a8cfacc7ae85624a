// The file side of the store log (store_log.h): reading store.log a record at a time, telling a
// torn last write from damage in the middle, and keeping a damaged log's copy before it is cut.
// Each works in bounded memory, whatever the size of the file: a restart of a store whose log is
// 400 MiB must not hold the file and the data it describes at once (806 MiB, issue 27).
//
// Thread safety: none; each object or call works on descriptors its caller owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace cohort::rdzv {

// CRC-32 (zlib's) of `bytes`: what protects each record of the log.
uint32_t log_crc(std::string_view bytes);

// Reads a file sequentially through a buffer of its own (1 MiB): small records cost no system
// call each, and a record larger than the buffer is read straight into its destination.
class LogReader {
 public:
  // `fd` must stay open while the reader is used; reading starts at its current offset.
  // `path` names the file in errors.
  LogReader(int fd, std::string path);
  ~LogReader();
  LogReader(const LogReader&) = delete;
  LogReader& operator=(const LogReader&) = delete;

  // Reads exactly `n` bytes into `out`; false when the file ends first (what was there is
  // consumed). Throws cohort::IoError when read(2) fails.
  bool read(char* out, size_t n);

 private:
  size_t fill();
  int fd_;
  std::string path_;
  std::unique_ptr<char[]> buf_;
  size_t begin_ = 0, end_ = 0;
};

// True when a whole, CRC-valid record starts at some offset of the file from `from` on (the file
// is `size` bytes): the damage before it is then in the middle of the log, which a torn last write
// cannot explain. Reads through a window of 1 MiB, so memory stays bounded. After checksumming
// 256 MiB it gives up and answers true (damage), the safe side. Throws IoError when pread fails.
bool valid_record_after(int fd, uint64_t size, uint64_t from, const std::string& path);

// Copies the first `size` bytes of the file open at `fd` (`path`, in directory `dir`) to a new
// file beside it, <path>.damaged-<UTC time>[-N] (never an existing one: two damages accepted in
// one second get two copies), and makes the copy durable: fsync of the copy, then of `dir`.
// Only then may the caller cut the log. Returns the copy's path; throws IoError (the copy
// removed) when any step fails.
std::string copy_aside_durably(int fd, uint64_t size, const std::string& path,
                               const std::string& dir);

// fsync(2) of the directory `dir`, so that a file created or renamed in it survives a crash.
// Throws IoError when it fails.
void sync_directory(const std::string& dir);

}  // namespace cohort::rdzv
