#include "cohort/train/checkpoint.h"
#include "cohort/error.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace cohort::train {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'C', 'K'};
constexpr const char* kPrefix = "ckpt_";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%010lld", kPrefix, static_cast<long long>(step));
  return buf;
}

[[noreturn]] void throw_errno(const std::string& what, const std::string& path) {
  throw IoError(what + " " + path + ": " + std::strerror(errno), errno);
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw_errno("cannot fsync directory", dir);
}

// Writes `parts` to a temporary file beside `final_path`, fsyncs it and renames it into place.
void atomic_write(const std::string& dir, const std::string& final_path,
                  const std::vector<std::pair<const void*, size_t>>& parts) {
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("cannot create", tmp);
  try {
    for (const auto& [data, n] : parts) write_all(fd, data, n, tmp);
    if (::fsync(fd) != 0) throw_errno("cannot fsync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw_errno("cannot close", tmp);
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw_errno("cannot rename into", final_path);
  }
  fsync_dir(dir);
}

}  // namespace

const std::vector<float>& Checkpoint::block(const std::string& name) const {
  for (const auto& [n, data] : blocks) {
    if (n == name) return data;
  }
  throw FormatError("checkpoint of step " + std::to_string(step) + " has no block '" + name + "'");
}

bool Checkpoint::has_block(const std::string& name) const {
  for (const auto& entry : blocks) {
    if (entry.first == name) return true;
  }
  return false;
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / (step_name(step) + ".bin")).string();
}

void write_checkpoint(const std::string& dir, const Checkpoint& ckpt, int keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create checkpoint directory " + dir + ": " + ec.message());

  nlohmann::json meta = ckpt.meta;
  meta["step"] = ckpt.step;
  nlohmann::json blocks = nlohmann::json::array();
  for (const auto& [name, data] : ckpt.blocks)
    blocks.push_back({{"name", name}, {"count", data.size()}});
  meta["blocks"] = blocks;
  const std::string meta_text = meta.dump();

  std::string header(kMagic, sizeof kMagic);
  put_u32(header, kCheckpointVersion);
  put_u32(header, static_cast<uint32_t>(meta_text.size()));
  header += meta_text;
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(header.data()), header.size());
  std::vector<std::pair<const void*, size_t>> parts{{header.data(), header.size()}};
  for (const auto& [name, data] : ckpt.blocks) {
    const size_t bytes = data.size() * sizeof(float);
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), bytes);
    parts.push_back({data.data(), bytes});
  }
  std::string trailer;
  put_u32(trailer, static_cast<uint32_t>(crc));
  parts.push_back({trailer.data(), trailer.size()});

  const std::string bin = checkpoint_path(dir, ckpt.step);
  atomic_write(dir, bin, parts);
  const std::string marker = (fs::path(dir) / (step_name(ckpt.step) + ".done")).string();
  const std::string marker_text = "crc32 " + std::to_string(crc) + "\n";
  atomic_write(dir, marker, {{marker_text.data(), marker_text.size()}});

  // Temporary files of a writer that died mid-write (a killed worker) are garbage: one writer per
  // directory, and ours are renamed by now.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) == 0 && name.find(".tmp.") != std::string::npos) {
      fs::remove(e.path(), ec);
    }
  }
  if (keep > 0) {
    const std::vector<int64_t> steps = list_checkpoints(dir);
    for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) {
      // Marker first: a half-deleted checkpoint is then merely incomplete.
      fs::remove(fs::path(dir) / (step_name(steps[i]) + ".done"), ec);
      fs::remove(checkpoint_path(dir, steps[i]), ec);
    }
  }
}

Checkpoint read_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_errno("cannot open checkpoint", path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof kMagic + 8 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    throw FormatError(path + ": not a cohort checkpoint (bad magic)");
  }
  const uint32_t version = get_u32(bytes.data() + 8);
  if (version != kCheckpointVersion) {
    throw FormatError(path + ": checkpoint version " + std::to_string(version) +
                      ", this build reads version " + std::to_string(kCheckpointVersion));
  }
  const size_t meta_len = get_u32(bytes.data() + 12);
  const size_t meta_at = 16;
  if (meta_at + meta_len + 4 > bytes.size()) throw FormatError(path + ": truncated header");
  Checkpoint c;
  try {
    c.meta = nlohmann::json::parse(bytes.begin() + meta_at, bytes.begin() + meta_at + meta_len);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(path + ": malformed metadata: " + e.what());
  }
  size_t at = meta_at + meta_len;
  try {
    c.step = c.meta.at("step").get<int64_t>();
    for (const auto& b : c.meta.at("blocks")) {
      const size_t count = b.at("count").get<size_t>();
      if (count > (bytes.size() - at) / sizeof(float)) {
        throw FormatError(path + ": truncated data");
      }
      std::vector<float> data(count);
      std::memcpy(data.data(), bytes.data() + at, count * sizeof(float));
      at += count * sizeof(float);
      c.blocks.emplace_back(b.at("name").get<std::string>(), std::move(data));
    }
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(path + ": malformed metadata: " + e.what());
  }
  if (at + 4 != bytes.size()) throw FormatError(path + ": size does not match its metadata");
  const uLong crc = crc32_z(crc32(0L, Z_NULL, 0), bytes.data(), at);
  if (static_cast<uint32_t>(crc) != get_u32(bytes.data() + at)) {
    throw FormatError(path + ": checksum mismatch (corrupt file)");
  }
  c.meta.erase("blocks");
  return c;
}

std::vector<int64_t> list_checkpoints(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || e.path().extension() != ".done") continue;
    const std::string digits = e.path().stem().string().substr(std::strlen(kPrefix));
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    steps.push_back(std::stoll(digits));
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir,
                                                 std::vector<std::string>* skipped) {
  for (int64_t step : list_checkpoints(dir)) {
    try {
      return read_checkpoint(checkpoint_path(dir, step));
    } catch (const std::exception& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  return std::nullopt;
}

}  // namespace cohort::train
