#include "cohort/train/text_data.h"
#include "cohort/error.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace cohort::train {
namespace fs = std::filesystem;

namespace {
void append_file(const fs::path& p, std::vector<uint8_t>& out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw IoError("cannot read " + p.string() + ": " + std::strerror(errno), errno);
  out.insert(out.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
}  // namespace

std::vector<uint8_t> load_text(const std::string& path_in) {
  const bool is_default = path_in.empty();
  const fs::path path = is_default ? fs::path(kDefaultTextDir) : fs::path(path_in);
  std::vector<uint8_t> out;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (!e.is_regular_file() || e.is_symlink()) continue;
      if (e.path().has_extension()) continue;  // fortune's .dat indexes and .u8 links
      files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) append_file(f, out);
  } else if (fs::is_regular_file(path, ec)) {
    append_file(path, out);
  }
  if (out.empty()) {
    if (is_default) {
      throw UsageError(std::string("no training text: ") + kDefaultTextDir +
                       " is missing or empty. Install Debian's package with 'apt-get "
                       "install fortunes' or pass --data FILE with any text file");
    }
    throw UsageError("no training text in " + path.string() +
                     " (a text file, or a directory of text files, is expected)");
  }
  return out;
}

TextSplit split_text(const std::vector<uint8_t>& bytes, double train_fraction) {
  const size_t n_train = static_cast<size_t>(static_cast<double>(bytes.size()) * train_fraction);
  TextSplit s;
  s.train.assign(bytes.begin(), bytes.begin() + n_train);
  s.val.assign(bytes.begin() + n_train, bytes.end());
  return s;
}

TextLoader::TextLoader(const std::vector<int32_t>& tokens, int B, int T, int rank, int world)
    : tokens_(tokens), B_(B), T_(T), rank_(rank), world_(world) {
  const int64_t need = static_cast<int64_t>(B) * T * world + 1;
  if (static_cast<int64_t>(tokens.size()) < need) {
    throw UsageError("text too short: " + std::to_string(tokens.size()) +
                     " tokens, one global batch of " + std::to_string(B) + "x" + std::to_string(T) +
                     " on " + std::to_string(world) + " ranks needs " + std::to_string(need));
  }
  reset();
}

void TextLoader::reset() {
  pos_ = rank_offset();
}

void TextLoader::set_global_position(int64_t p) {
  pos_ = p + rank_offset();
  const int64_t global_batch = static_cast<int64_t>(B_) * T_ * world_;
  if (p < 0 || p + global_batch + 1 > static_cast<int64_t>(tokens_.size())) reset();
}

void TextLoader::next(int32_t* x, int32_t* y) {
  const int64_t n = static_cast<int64_t>(B_) * T_;
  std::memcpy(x, tokens_.data() + pos_, n * sizeof(int32_t));
  std::memcpy(y, tokens_.data() + pos_ + 1, n * sizeof(int32_t));
  pos_ += n * world_;
  // Every rank wraps at the same step: when the next global batch would not fit.
  if (global_position() + n * world_ + 1 > static_cast<int64_t>(tokens_.size())) reset();
}

}  // namespace cohort::train
