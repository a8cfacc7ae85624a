// Fashion-MNIST in IDX format (Debian's dataset-fashion-mnist: /usr/share/datasets/fashion-mnist,
// gzip-compressed; uncompressed files are read too).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::train {

inline constexpr const char* kDefaultFmnistDir = "/usr/share/datasets/fashion-mnist";
// Normalisation of the inputs after scaling to [0, 1].
inline constexpr float kFmnistMean = 0.2860f;
inline constexpr float kFmnistStd = 0.3530f;

struct FmnistSplit {
  int count = 0;
  std::vector<uint8_t> images;  // (count, 28, 28) pixels 0..255
  std::vector<int32_t> labels;  // (count) in 0..9
};

// Reads "train" (train-images-idx3-ubyte[.gz], 60,000 images) or "test" (t10k-*, 10,000) from
// `dir`; only the first `limit` items when limit > 0 (the rest is not decompressed). Throws
// std::runtime_error with a message that names the files, the directory and the Debian package
// when they are missing or malformed.
FmnistSplit load_fmnist(const std::string& dir, const std::string& split, int64_t limit = 0);

// Writes the images with the given indices into `out` (n, 28, 28, 1) as normalised floats,
// ((p / 255) - mean) / std, and their labels into `labels` (n).
void gather_fmnist(const FmnistSplit& data, const size_t* indices, size_t n, float* out,
                   int32_t* labels);

}  // namespace cohort::train
