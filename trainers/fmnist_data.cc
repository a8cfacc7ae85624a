#include "cohort/train/fmnist_data.h"
#include "cohort/error.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace cohort::train {
namespace {

std::string missing_message(const std::string& dir, const std::string& file) {
  return "Fashion-MNIST not found: no " + file + "[.gz] in " + dir +
         ". Install Debian's package with 'apt-get install dataset-fashion-mnist' (it provides " +
         kDefaultFmnistDir + ") or pass --data DIR with the four IDX files";
}

// Reads up to max_bytes (0: all) of an optionally gzip-compressed file; gzread passes plain files
// through.
std::vector<uint8_t> read_maybe_gz(const std::string& dir, const std::string& name,
                                   size_t max_bytes) {
  namespace fs = std::filesystem;
  std::string path = (fs::path(dir) / (name + ".gz")).string();
  if (!fs::exists(path)) path = (fs::path(dir) / name).string();
  if (!fs::exists(path)) throw UsageError(missing_message(dir, name));
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw IoError("cannot open " + path + ": " + std::strerror(errno), errno);
  std::vector<uint8_t> out;
  std::array<uint8_t, 1 << 16> buf;
  for (;;) {
    size_t want = buf.size();
    if (max_bytes > 0) {
      if (out.size() >= max_bytes) break;
      want = std::min(want, max_bytes - out.size());
    }
    const int n = gzread(f, buf.data(), static_cast<unsigned>(want));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      throw IoError("cannot read " + path + ": " + msg);
    }
    if (n == 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
  gzclose(f);
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

FmnistSplit load_fmnist(const std::string& dir, const std::string& split, int64_t limit) {
  if (split != "train" && split != "test") {
    throw UsageError("load_fmnist: split must be 'train' or 'test', not '" + split + "'");
  }
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string img_name = prefix + "-images-idx3-ubyte";
  const std::string lbl_name = prefix + "-labels-idx1-ubyte";
  const size_t n_max = limit > 0 ? static_cast<size_t>(limit) : 0;
  const std::vector<uint8_t> img = read_maybe_gz(dir, img_name, n_max ? 16 + n_max * 784 : 0);
  const std::vector<uint8_t> lbl = read_maybe_gz(dir, lbl_name, n_max ? 8 + n_max : 0);
  if (img.size() < 16 || be32(img.data()) != 0x803 || be32(img.data() + 8) != 28 ||
      be32(img.data() + 12) != 28) {
    throw FormatError(dir + "/" + img_name + ": not an IDX file of 28x28 uint8 images");
  }
  if (lbl.size() < 8 || be32(lbl.data()) != 0x801) {
    throw FormatError(dir + "/" + lbl_name + ": not an IDX file of uint8 labels");
  }
  const uint32_t total = be32(img.data() + 4);
  const uint32_t n = n_max && n_max < total ? static_cast<uint32_t>(n_max) : total;
  if (be32(lbl.data() + 4) != total || img.size() != 16 + size_t{n} * 784 || lbl.size() != 8 + n) {
    throw FormatError(dir + ": " + img_name + " and " + lbl_name +
                      " disagree on the number of items or are truncated");
  }
  FmnistSplit s;
  s.count = static_cast<int>(n);
  s.images.assign(img.begin() + 16, img.end());
  s.labels.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (lbl[8 + i] > 9) throw FormatError(dir + "/" + lbl_name + ": label out of range");
    s.labels[i] = lbl[8 + i];
  }
  return s;
}

void gather_fmnist(const FmnistSplit& data, const size_t* indices, size_t n, float* out,
                   int32_t* labels) {
  // The same float arithmetic as the PyTorch twin: (p / 255 - mean) / std in float32.
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int p = 0; p < 256; ++p)
      t[p] = (static_cast<float>(p) / 255.0f - kFmnistMean) / kFmnistStd;
    return t;
  }();
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* src = data.images.data() + indices[i] * 784;
    float* dst = out + i * 784;
    for (int j = 0; j < 784; ++j) dst[j] = table[src[j]];
    labels[i] = data.labels[indices[i]];
  }
}

}  // namespace cohort::train
