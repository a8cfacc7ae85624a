#include "server/store_log.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "cohort/error.h"
#include "cohort/rdzv/codec.h"
#include "server/log_file.h"

namespace cohort::rdzv {
namespace {

constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'L', 'G'};
// Version 2 added kAppend; version 1 logs are read as they are.
constexpr uint32_t kVersion = 2, kOldestVersion = 1;
constexpr size_t kHeader = 12;
enum Entry : uint8_t { kSet = 1, kDelete = 2, kReply = 3, kAppend = 4 };

Error io_error(const std::string& what, const std::string& path) {
  return Error("store log " + path + ": " + what + ": " + std::strerror(errno));
}

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error("write failed", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::string frame(const std::string& payload) {
  std::string out;
  put_u32(&out, static_cast<uint32_t>(payload.size()));
  put_u32(&out, log_crc(payload));
  out.append(payload);
  return out;
}

std::string header() {
  std::string h(kMagic, sizeof(kMagic));
  put_u32(&h, kVersion);
  return h;
}

void fsync_dir(const std::string& dir) {
  int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

}  // namespace

FsyncPolicy parse_fsync_policy(const std::string& text) {
  if (text == "always") return FsyncPolicy::kAlways;
  if (text == "interval") return FsyncPolicy::kInterval;
  if (text == "never") return FsyncPolicy::kNever;
  throw UsageError("--fsync must be always, interval or never (got '" + text + "')");
}

StoreLog::StoreLog(const std::string& dir, StoreState* state, FsyncPolicy policy,
                   bool accept_damage)
    : dir_(dir),
      path_(dir + "/store.log"),
      state_(state),
      policy_(policy),
      accept_damage_(accept_damage) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw Error("cannot create --data-dir " + dir_ + ": " + ec.message());
  replay();
  // A compaction's file left by a crash (store.log is whole until the rename that ends one).
  ::unlink((path_ + ".compact").c_str());
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) throw io_error("cannot open", path_);
  if (size_ == 0) {
    write_all(fd_, header(), path_);
    size_ = kHeader;
    version_ = kVersion;
    ::fsync(fd_);
    fsync_dir(dir_);
  }
  state_->set_journal(this);
}

StoreLog::~StoreLog() {
  abandon_compaction();
  state_->set_journal(nullptr);
  if (fd_ >= 0) {
    if (dirty_ && policy_ != FsyncPolicy::kNever) ::fsync(fd_);
    ::close(fd_);
  }
}

bool StoreLog::apply_batch(std::string_view payload) {
  WireReader e(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
  while (e.left() > 0) {
    uint8_t type;
    std::string_view key, value;
    bool too_long = false;
    if (!e.u8(&type)) return false;
    if (type == kSet) {
      if (!e.bytes(&key, UINT64_MAX, &too_long) || !e.bytes(&value, UINT64_MAX, &too_long))
        return false;
      state_->restore(key, value);
    } else if (type == kDelete) {
      if (!e.bytes(&key, UINT64_MAX, &too_long)) return false;
      state_->restore_delete(key);
    } else if (type == kAppend) {
      if (!e.bytes(&key, UINT64_MAX, &too_long) || !e.bytes(&value, UINT64_MAX, &too_long))
        return false;
      state_->restore_append(key, value);
    } else if (type == kReply) {
      uint64_t client, request;
      if (!e.u64(&client) || !e.u64(&request) || !e.bytes(&value, UINT64_MAX, &too_long))
        return false;
      state_->remember_reply(client, request, std::string(value));
    } else {
      return false;  // CRC-valid but malformed: treated as damage
    }
  }
  return true;
}

void StoreLog::replay() {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return;
    throw io_error("cannot open", path_);
  }
  // Closed on every way out; replay throws on a bad header, damage and I/O errors.
  std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { ::close(*f); });
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw io_error("cannot examine", path_);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size == 0) {
    empty_file_ = true;
    return;
  }
  // A record at a time: the file is never in memory whole, only the largest record.
  LogReader in(fd, path_);
  char head[kHeader];
  if (!in.read(head, kHeader) || std::memcmp(head, kMagic, sizeof(kMagic)) != 0) {
    throw Error("store log " + path_ +
                " is not a cohortd log (bad magic); move it away to start "
                "with an empty store");
  }
  uint32_t version;
  std::memcpy(&version, head + 8, 4);
  if (version < kOldestVersion || version > kVersion) {
    throw Error("store log " + path_ + " has version " + std::to_string(version) +
                ", this cohortd reads versions " + std::to_string(kOldestVersion) + " to " +
                std::to_string(kVersion));
  }
  version_ = version;
  uint64_t pos = kHeader;
  bool damaged = false;
  std::string payload;
  while (pos < file_size) {
    char frame_head[8];
    uint32_t len, sum;
    if (file_size - pos < 8 || !in.read(frame_head, 8)) {
      damaged = true;
      break;
    }
    std::memcpy(&len, frame_head, 4);
    std::memcpy(&sum, frame_head + 4, 4);
    if (len > file_size - pos - 8) {
      damaged = true;
      break;
    }
    payload.resize(len);
    if (!in.read(payload.data(), len) || log_crc(payload) != sum || !apply_batch(payload)) {
      damaged = true;
      break;
    }
    ++replayed_;
    pos += 8 + len;
    if (payload.capacity() > (1u << 20)) std::string().swap(payload);  // a large one's buffer
  }
  if (damaged) {
    if (valid_record_after(fd, file_size, pos + 1, path_)) {
      if (!accept_damage_) {
        throw Error("store log " + path_ + " is damaged at offset " + std::to_string(pos) + " of " +
                    std::to_string(file_size) + " bytes (after record " +
                    std::to_string(replayed_) +
                    "), and valid records follow: not a torn last write. cohortd left the file "
                    "as it is. Restore it from a copy, or start with --accept-log-damage to "
                    "keep what precedes the damage (the file is first copied aside)");
      }
      // The copy is on disk, with its name in the directory, before the log loses a byte.
      damaged_copy_ = copy_aside_durably(fd, file_size, path_, dir_);
    }
    // Cut the damage off, so appends continue from the last good record; synced, so that a
    // crash cannot bring the damage back behind records appended after it.
    torn_tail_ = true;
    dropped_bytes_ = file_size - pos;
    int w = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (w < 0) throw io_error("cannot open", path_);
    const bool cut = ::ftruncate(w, static_cast<off_t>(pos)) == 0 && ::fsync(w) == 0;
    const int err = errno;
    ::close(w);
    errno = err;
    if (!cut) throw io_error("cannot truncate", path_);
  }
  size_ = pos;
}

void StoreLog::begin_batch() {
  ++batch_depth_;
}

void StoreLog::end_batch() {
  if (--batch_depth_ > 0) return;
  if (!batch_.empty()) append_record(batch_);
  batch_.clear();
}

void StoreLog::add_entry(const std::string& entry) {
  if (batch_depth_ > 0) {
    batch_.append(entry);
  } else {
    append_record(entry);
  }
}

void StoreLog::on_change(std::string_view key, const std::string* value) {
  std::string entry;
  put_u8(&entry, value ? kSet : kDelete);
  put_bytes(&entry, key);
  if (value) put_bytes(&entry, *value);
  add_entry(entry);
}

void StoreLog::on_append(std::string_view key, std::string_view suffix, const std::string& value) {
  if (version_ < 2) {
    on_change(key, &value);  // an older cohortd may still read this file
    return;
  }
  std::string entry;
  put_u8(&entry, kAppend);
  put_bytes(&entry, key);
  put_bytes(&entry, suffix);
  add_entry(entry);
}

void StoreLog::on_reply(uint64_t client, uint64_t request, const std::string& reply) {
  std::string entry;
  put_u8(&entry, kReply);
  put_u64(&entry, client);
  put_u64(&entry, request);
  put_bytes(&entry, reply);
  add_entry(entry);
}

void StoreLog::append_record(const std::string& payload) {
  std::string rec = frame(payload);
  write_all(fd_, rec, path_);
  size_ += rec.size();
  bytes_written_ += rec.size();
  if (!dirty_) dirty_since_ = std::chrono::steady_clock::now();
  dirty_ = true;
  if (policy_ == FsyncPolicy::kAlways) sync();
}

void StoreLog::sync() {
  if (!dirty_ || fd_ < 0) return;
  ::fdatasync(fd_);
  dirty_ = false;
}

void StoreLog::sync_in_background() {
  if (!dirty_ || fd_ < 0) return;
  if (!syncer_) syncer_ = std::make_unique<BackgroundSync>();
  if (syncer_->request(fd_)) dirty_ = false;  // else one still runs: ask again at the next tick
}

uint64_t StoreLog::snapshot_size() const {
  // Each entry's frame (8), type (1) and length prefixes (8 each), as write_compacted() writes
  // them.
  // From the state's counters: a million keys are not visited each second.
  return kHeader + state_->num_keys() * (8 + 1 + 8 + 8) + state_->key_value_bytes() +
         state_->num_replies() * (8 + 1 + 8 + 8 + 8) + state_->reply_bytes();
}

bool StoreLog::compaction_due(double factor) {
  if (batch_depth_ > 0 || compacting()) return false;
  // Cheap checks first: only look when the log is big enough to bother and has grown since the
  // last look (an idle store costs nothing), and size the snapshot without building it.
  if (size_ < (1u << 20) || size_ == checked_at_size_) return false;
  checked_at_size_ = size_;
  return static_cast<double>(size_) >= factor * static_cast<double>(snapshot_size()) + (1u << 20);
}

bool StoreLog::maybe_compact(double factor) {
  if (!start_compaction(factor)) return false;
  pollfd p{result_fd_, POLLIN, 0};
  while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
  return finish_compaction();
}

bool StoreLog::start_compaction(double factor) {
  if (!compaction_due(factor)) return false;
  tmp_path_ = path_ + ".compact";
  // A fresh inode each time: nothing still holding an older one (a child of a killed cohortd not
  // yet gone) can write into this one.
  ::unlink(tmp_path_.c_str());
  int pipe_fds[2] = {-1, -1};
  tmp_fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
  if (tmp_fd_ < 0) throw io_error("cannot create", tmp_path_);
  read_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (read_fd_ < 0 || ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    Error e = io_error("cannot start compaction", path_);
    abandon_compaction();
    throw e;
  }
  result_fd_ = pipe_fds[0];
  fork_size_ = size_;
  fork_errno_ = 0;
  tail_bytes_ = 0;
  const pid_t parent = ::getpid();
  // fork() runs between two events of the loop, outside any batch: the child's copy of the state
  // is exactly what store.log holds up to fork_size_.
  pid_t pid = ::fork();
  if (pid == 0) child_main(tmp_fd_, read_fd_, pipe_fds[1], fork_size_, parent);
  if (pid < 0) {
    // No child (out of memory or processes): do its work here, pausing the loop as compaction
    // always did, rather than let the log grow without bound.
    fork_errno_ = errno;
    ChildResult r = write_compacted(tmp_fd_, read_fd_, fork_size_);
    ssize_t ignored = ::write(pipe_fds[1], &r, sizeof(r));
    (void)ignored;
  } else {
    child_ = pid;
  }
  ::close(pipe_fds[1]);
  return true;
}

void StoreLog::child_main(int out, int log, int pipe_w, uint64_t from, pid_t parent) const {
  // Async-signal-safe calls only from here on (cohortd has other threads, its log writer among
  // them, whose locks may be held at the fork): no allocation, no logging.
  // Die with the parent: an orphan must not hold the listening socket or the clients' sockets.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);
  // SIGINT/SIGTERM would run the parent's (Asio's) handler, which tells the parent's loop: here
  // they end the child instead (the parent then sees the pipe close and abandons the compaction).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &dfl, nullptr);
  // Yield the CPU to the loop (on a small machine the child would otherwise compete with it).
  ::setpriority(PRIO_PROCESS, 0, 10);
  // Close every inherited descriptor but ours: a socket the parent closes meanwhile must close
  // for its client now, not when the child exits.
  int keep[3] = {out, log, pipe_w};
  std::sort(keep, keep + 3);
  unsigned lo = 3;
  for (int k : keep) {
    if (static_cast<unsigned>(k) > lo)
      ::syscall(SYS_close_range, lo, static_cast<unsigned>(k) - 1, 0);
    lo = std::max(lo, static_cast<unsigned>(k) + 1);
  }
  ::syscall(SYS_close_range, lo, ~0u, 0);
  ChildResult r = write_compacted(out, log, from);
  ssize_t ignored = ::write(pipe_w, &r, sizeof(r));
  (void)ignored;
  ::_exit(0);
}

namespace {

// Buffered writing of snapshot records without allocating (see child_main()).
class SnapshotWriter {
 public:
  explicit SnapshotWriter(int fd) : fd_(fd) {}
  void put(const void* data, size_t n) {
    if (err_) return;
    if (len_ + n > sizeof(buf_)) flush();
    if (n >= sizeof(buf_)) {
      raw(static_cast<const char*>(data), n);
    } else {
      std::memcpy(buf_ + len_, data, n);
      len_ += n;
    }
  }
  template <class T>
  void put_le(T v) {
    put(&v, sizeof(v));  // little-endian, as codec.h's put_u32/put_u64
  }
  // One record of one entry: type, then each field (a u64 and its bytes when `bytes`).
  void record(uint8_t type, uint64_t a, uint64_t b, std::string_view first, std::string_view second,
              bool first_is_bytes) {
    uint64_t len1 = first.size(), len2 = second.size();
    uint32_t payload = static_cast<uint32_t>(1 + (first_is_bytes ? 8 + len1 : 16) + 8 + len2);
    uint32_t sum = static_cast<uint32_t>(::crc32(0, &type, 1));
    auto add = [&sum](const void* p, size_t n) {
      sum = static_cast<uint32_t>(::crc32_z(sum, static_cast<const Bytef*>(p), n));
    };
    if (first_is_bytes) {
      add(&len1, 8);
      add(first.data(), len1);
    } else {
      add(&a, 8);
      add(&b, 8);
    }
    add(&len2, 8);
    add(second.data(), len2);
    put_le(payload);
    put_le(sum);
    put(&type, 1);
    if (first_is_bytes) {
      put_le(len1);
      put(first.data(), len1);
    } else {
      put_le(a);
      put_le(b);
    }
    put_le(len2);
    put(second.data(), len2);
  }
  void flush() {
    if (!err_ && len_ > 0) raw(buf_, len_);
    len_ = 0;
  }
  int error() const { return err_; }

 private:
  void raw(const char* p, size_t n) {
    while (n > 0 && !err_) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        err_ = errno;
        return;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  int fd_;
  int err_ = 0;
  size_t len_ = 0;
  char buf_[64 << 10];
};

// Appends the bytes of `log` from *offset to its end to `out`; errno, or 0.
int copy_tail(int log, int out, uint64_t* offset, char* buf, size_t size) {
  for (;;) {
    ssize_t n = ::pread(log, buf, size, static_cast<off_t>(*offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return 0;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(out, buf + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return errno;
      done += w;
    }
    *offset += static_cast<uint64_t>(n);
  }
}

// Closes two descriptors in a thread of its own: closing the last descriptor of a big unlinked
// file frees its pages, which takes time. Inline when no thread can be started.
void close_in_background(int a, int b) {
  try {
    std::thread([a, b] {
      ::close(a);
      ::close(b);
    }).detach();
  } catch (const std::system_error&) {
    ::close(a);
    ::close(b);
  }
}

}  // namespace

StoreLog::ChildResult StoreLog::write_compacted(int out, int log, uint64_t from) const noexcept {
  ChildResult r;
  // The writer's 64 KiB buffer is on the stack (a loop thread's stack is megabytes); the
  // std::function built from a lambda capturing one reference is stored in place, not allocated.
  SnapshotWriter w(out);
  w.put(kMagic, sizeof(kMagic));
  w.put_le(kVersion);
  state_->for_each(
      [&w](const std::string& k, const std::string& v) { w.record(kSet, 0, 0, k, v, true); });
  state_->for_each_reply([&w](uint64_t c, uint64_t q, const std::string& reply) {
    w.record(kReply, c, q, {}, reply, false);
  });
  w.flush();
  if ((r.err = w.error()) != 0) {
    r.stage = 1;
    return r;
  }
  // The tail, synced once in bulk and then again with what came meanwhile, so that what the
  // parent has left to copy and sync in its loop is small.
  char buf[64 << 10];
  r.copied_to = from;
  for (int round = 0; round < 2; ++round) {
    if ((r.err = copy_tail(log, out, &r.copied_to, buf, sizeof(buf))) != 0) {
      r.stage = 2;
      return r;
    }
    if (round == 0 && ::fdatasync(out) != 0) {
      r.err = errno;
      r.stage = 3;
      return r;
    }
  }
  return r;
}

void StoreLog::close_compaction_fds() {
  for (int* fd : {&result_fd_, &tmp_fd_, &read_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void StoreLog::abandon_compaction() {
  if (child_ > 0) {
    ::kill(child_, SIGKILL);
    while (::waitpid(child_, nullptr, 0) < 0 && errno == EINTR) {
    }
    child_ = 0;
  }
  if (result_fd_ >= 0 || tmp_fd_ >= 0) ::unlink(tmp_path_.c_str());
  close_compaction_fds();
}

bool StoreLog::finish_compaction() {
  if (!compacting()) return false;
  ChildResult r;
  ssize_t n;
  while ((n = ::read(result_fd_, &r, sizeof(r))) < 0 && errno == EINTR) {
  }
  int status = 0;
  if (child_ > 0) {
    // The child wrote its report (or died): it is exiting; reap it. ECHILD: someone reaped it
    // for us (a launcher hosting the store reaps strays), the report says how it went.
    while (::waitpid(child_, &status, 0) < 0 && errno == EINTR) {
    }
    child_ = 0;
  }
  std::string failure;
  if (n != static_cast<ssize_t>(sizeof(r))) {
    failure =
        "the compaction child ended without finishing (wait status " + std::to_string(status) + ")";
  } else if (r.err != 0) {
    static const char* const kStage[] = {"", "writing the snapshot", "copying the log", "syncing"};
    failure = std::string(kStage[r.stage & 3]) + " failed: " + std::strerror(r.err);
  } else if (r.copied_to > size_) {
    failure = "the log holds bytes past its last record (an earlier failed write)";
  } else {
    uint64_t at = r.copied_to;
    char buf[64 << 10];
    int err = copy_tail(read_fd_, tmp_fd_, &at, buf, sizeof(buf));
    if (err == 0 && at != size_) err = EIO;
    if (err == 0 && ::fdatasync(tmp_fd_) != 0) err = errno;
    if (err != 0) failure = std::string("copying the log's tail failed: ") + std::strerror(err);
    tail_bytes_ = at - r.copied_to;
  }
  if (!failure.empty()) {
    abandon_compaction();
    throw Error("store log " + path_ +
                ": compaction abandoned (the log is kept as it is): " + failure);
  }
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    Error e = io_error("cannot replace", path_);
    abandon_compaction();
    throw e;
  }
  fsync_dir(dir_);
  struct stat st {};
  ::fstat(tmp_fd_, &st);
  // The last close of the replaced log frees its page cache: ~100 ms for 400 MB, so not here.
  close_in_background(fd_, read_fd_);
  read_fd_ = -1;
  fd_ = tmp_fd_;  // opened O_APPEND, as the log's own descriptor
  tmp_fd_ = -1;
  close_compaction_fds();
  size_ = checked_at_size_ = static_cast<uint64_t>(st.st_size);
  version_ = kVersion;
  bytes_written_ += size_;
  ++compactions_;
  dirty_ = false;
  return true;
}

}  // namespace cohort::rdzv
