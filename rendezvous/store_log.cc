#include "store_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "cohort/error.h"
#include "cohort/rdzv/codec.h"

namespace cohort::rdzv {
namespace {

constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'L', 'G'};
// Version 2 added kAppend; version 1 logs are read as they are.
constexpr uint32_t kVersion = 2, kOldestVersion = 1;
constexpr size_t kHeader = 12;
enum Entry : uint8_t { kSet = 1, kDelete = 2, kReply = 3, kAppend = 4 };

uint32_t crc(std::string_view s) {
  return static_cast<uint32_t>(
      ::crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

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
  put_u32(&out, crc(payload));
  out.append(payload);
  return out;
}

// True when a whole, CRC-valid record starts at some offset from `from` on: the damage before it is
// then in the middle of the log, which a torn last write cannot explain. Bounded: after
// checksumming kScanBudget bytes it gives up and answers true (damage), the safe side.
bool valid_record_after(const std::string& data, size_t from) {
  constexpr uint64_t kScanBudget = 256ull << 20;
  uint64_t spent = 0;
  for (size_t p = from; p + 8 < data.size(); ++p) {
    uint32_t len, sum;
    std::memcpy(&len, data.data() + p, 4);
    std::memcpy(&sum, data.data() + p + 4, 4);
    if (len == 0 || len > data.size() - p - 8) continue;
    if ((spent += len) > kScanBudget) return true;
    if (crc(std::string_view(data.data() + p + 8, len)) == sum) return true;
  }
  return false;
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
      state_->restore(std::string(key), std::string(value));
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
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      throw io_error("cannot read", path_);
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (data.empty()) {
    empty_file_ = true;
    return;
  }
  if (data.size() < kHeader || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    throw Error("store log " + path_ +
                " is not a cohortd log (bad magic); move it away to start "
                "with an empty store");
  }
  uint32_t version;
  std::memcpy(&version, data.data() + 8, 4);
  if (version < kOldestVersion || version > kVersion) {
    throw Error("store log " + path_ + " has version " + std::to_string(version) +
                ", this cohortd reads versions " + std::to_string(kOldestVersion) + " to " +
                std::to_string(kVersion));
  }
  version_ = version;
  size_t pos = kHeader;
  bool damaged = false;
  while (pos < data.size()) {
    WireReader r(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()) + pos,
                                          data.size() - pos));
    uint32_t len, sum;
    if (!r.u32(&len) || !r.u32(&sum) || r.left() < len) {
      damaged = true;
      break;
    }
    std::string_view payload(data.data() + pos + 8, len);
    if (crc(payload) != sum || !apply_batch(payload)) {
      damaged = true;
      break;
    }
    ++replayed_;
    pos += 8 + len;
  }
  if (damaged) {
    if (valid_record_after(data, pos + 1)) {
      if (!accept_damage_) {
        throw Error("store log " + path_ + " is damaged at offset " + std::to_string(pos) + " of " +
                    std::to_string(data.size()) + " bytes (after record " +
                    std::to_string(replayed_) +
                    "), and valid records follow: not a torn last write. cohortd left the file "
                    "as it is. Restore it from a copy, or start with --accept-log-damage to "
                    "keep what precedes the damage (the file is first copied aside)");
      }
      damaged_copy_ = path_ + ".damaged-" + std::to_string(::time(nullptr));
      std::error_code ec;
      std::filesystem::copy_file(path_, damaged_copy_, ec);
      if (ec) throw Error("cannot copy the damaged " + path_ + " aside: " + ec.message());
    }
    // Cut the damage off, so appends continue from the last good record.
    torn_tail_ = true;
    dropped_bytes_ = data.size() - pos;
    if (::truncate(path_.c_str(), static_cast<off_t>(pos)) != 0)
      throw io_error("cannot truncate", path_);
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
  dirty_ = true;
  if (policy_ == FsyncPolicy::kAlways) sync();
}

void StoreLog::sync() {
  if (!dirty_ || fd_ < 0) return;
  ::fdatasync(fd_);
  dirty_ = false;
}

std::string StoreLog::snapshot() const {
  std::string out = header();
  state_->for_each([&](const std::string& k, const std::string& v) {
    std::string e;
    put_u8(&e, kSet);
    put_bytes(&e, k);
    put_bytes(&e, v);
    out += frame(e);
  });
  state_->for_each_reply([&](uint64_t c, uint64_t r, const std::string& reply) {
    std::string e;
    put_u8(&e, kReply);
    put_u64(&e, c);
    put_u64(&e, r);
    put_bytes(&e, reply);
    out += frame(e);
  });
  return out;
}

uint64_t StoreLog::snapshot_size() const {
  // Each entry's frame (8), type (1) and length prefixes (8 each), as snapshot() writes them.
  uint64_t n = kHeader;
  state_->for_each([&](const std::string& k, const std::string& v) {
    n += 8 + 1 + 8 + k.size() + 8 + v.size();
  });
  state_->for_each_reply(
      [&](uint64_t, uint64_t, const std::string& reply) { n += 8 + 1 + 8 + 8 + 8 + reply.size(); });
  return n;
}

bool StoreLog::maybe_compact(double factor) {
  if (batch_depth_ > 0) return false;
  // Cheap checks first: only look when the log is big enough to bother and has grown since the
  // last look (an idle store costs nothing), and size the snapshot before building it.
  if (size_ < (1u << 20) || size_ == checked_at_size_) return false;
  checked_at_size_ = size_;
  if (static_cast<double>(size_) < factor * static_cast<double>(snapshot_size()) + (1u << 20))
    return false;
  std::string snap = snapshot();
  std::string tmp = path_ + ".compact";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw io_error("cannot create", tmp);
  try {
    write_all(fd, snap, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path_.c_str()) != 0) throw io_error("cannot replace", path_);
  fsync_dir(dir_);
  ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) throw io_error("cannot reopen", path_);
  size_ = checked_at_size_ = snap.size();
  version_ = kVersion;
  bytes_written_ += snap.size();
  ++compactions_;
  dirty_ = false;
  return true;
}

}  // namespace cohort::rdzv
