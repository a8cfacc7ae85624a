// Text for the GPT: bytes are tokens (vocabulary 256), a 90/10 train/validation split, and
// build-nanogpt's DataLoaderLite sharding (each rank reads its own contiguous slice of every
// global batch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::train {

inline constexpr const char* kDefaultTextDir = "/usr/share/games/fortunes";

// Reads `path`: a file, or a directory whose plain-text files (no extension; fortune's .dat and
// .u8 companions skipped) are concatenated in name order. An empty path means kDefaultTextDir,
// the English text of Debian's fortunes package. Throws cohort::IoError or UsageError naming the
// path (and the package for the default) when nothing can be read.
std::vector<uint8_t> load_text(const std::string& path);

struct TextSplit {
  std::vector<int32_t> train, val;
};
// The first 90% of the bytes (rounded down) for training, the rest for validation.
TextSplit split_text(const std::vector<uint8_t>& bytes, double train_fraction = 0.9);

// DataLoaderLite: rank r starts at B*T*r and every batch advances B*T*world; when the next global
// batch would run past the end it starts over. A batch is B*T+1 consecutive tokens: inputs are the
// first B*T, targets the last B*T.
class TextLoader {
 public:
  // REQUIRES: tokens.size() > B*T*world (throws cohort::UsageError otherwise). `tokens` must
  // outlive the loader.
  TextLoader(const std::vector<int32_t>& tokens, int B, int T, int rank, int world);

  // Copies the next batch: x (B, T) inputs, y (B, T) targets.
  void next(int32_t* x, int32_t* y);
  // Back to the start (validation runs from the beginning each time).
  void reset();

  // Position of rank 0's next batch: the loader state in a checkpoint, the same on every rank and
  // valid at any world size.
  int64_t global_position() const { return pos_ - rank_offset(); }
  void set_global_position(int64_t p);

 private:
  int64_t rank_offset() const { return static_cast<int64_t>(B_) * T_ * rank_; }
  const std::vector<int32_t>& tokens_;
  int B_, T_, rank_, world_;
  int64_t pos_ = 0;
};

}  // namespace cohort::train
