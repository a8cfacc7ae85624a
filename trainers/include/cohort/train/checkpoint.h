// Checkpoints: a trainer's whole state in one file, written atomically, found again on restart.
//
// File <dir>/ckpt_<step, 10 digits>.bin:
//   "COHORTCK" (8 bytes) | version u32 = 1 | meta length u32 | meta (JSON text) |
//   float32 blocks, in the order and sizes the meta's "blocks" list gives | crc32 u32 of all before
// all little-endian. The magic and version are checked before anything else is read.
// Marker <dir>/ckpt_<step>.done: written after the .bin is durable; a checkpoint without its
// marker is incomplete and ignored.
// Writes go to a temporary file in the same directory, then fsync, rename, fsync of the directory
// (for the .bin, then again for the marker), so a crash at any point leaves either the previous
// complete checkpoint or the new one.
//
// Thread safety: the functions are independent; two writers must not share a directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::train {

inline constexpr uint32_t kCheckpointVersion = 1;

struct Checkpoint {
  int64_t step = 0;
  // Trainer-defined state: epoch, sampler or loader position, RNG state, config, world size...
  nlohmann::json meta;
  // Named float blocks: "params", "momentum", "adam_m", "adam_v", ...
  std::vector<std::pair<std::string, std::vector<float>>> blocks;

  // The block called `name`; throws cohort::FormatError when missing.
  const std::vector<float>& block(const std::string& name) const;
  bool has_block(const std::string& name) const;
};

// Writes `ckpt` as <dir>/ckpt_<step>.bin plus its marker (creating dir), then deletes all but the
// newest `keep` complete checkpoints (keep <= 0 keeps all) and temporary files that an earlier,
// killed writer left behind. Throws cohort::IoError naming the
// file and errno on any I/O failure; a failed write leaves no marker.
void write_checkpoint(const std::string& dir, const Checkpoint& ckpt, int keep = 2);

// Reads and validates one checkpoint file (magic, version, sizes, crc). Throws cohort::IoError
// (unreadable) or FormatError (not a valid checkpoint) saying what is wrong.
Checkpoint read_checkpoint(const std::string& path);

// Steps of the complete checkpoints in `dir` (those with a marker), newest first. Empty when the
// directory does not exist.
std::vector<int64_t> list_checkpoints(const std::string& dir);

// The newest complete checkpoint of `dir` that validates; corrupt ones are skipped (their error is
// appended to *skipped when given). nullopt when there is none.
std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir,
                                                 std::vector<std::string>* skipped = nullptr);

// Path of the .bin file of `step` in `dir`.
std::string checkpoint_path(const std::string& dir, int64_t step);

}  // namespace cohort::train
