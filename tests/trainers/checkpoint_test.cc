// Checkpoint files: round trip, atomicity markers, validation of every byte, retention.
#include "cohort/train/checkpoint.h"
#include "cohort/error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test_util.h"

namespace cohort::train {
namespace {
namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort_ckpt_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static Checkpoint make(int64_t step, float base) {
    Checkpoint c;
    c.step = step;
    c.meta = {{"epoch", 3}, {"rng", {1, 2, 3, 4}}, {"note", "x"}};
    c.blocks = {{"params", {base, base + 1, base + 2}}, {"momentum", {-base}}};
    return c;
  }
  static std::vector<char> read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void write_bytes(const fs::path& p, const std::vector<char>& b) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
  }

  fs::path dir_;
};

TEST_F(CheckpointTest, RoundTrip) {
  write_checkpoint(dir_.string(), make(7, 1.5f), 0);
  const Checkpoint c = read_checkpoint(checkpoint_path(dir_.string(), 7));
  EXPECT_EQ(c.step, 7);
  EXPECT_EQ(c.meta.at("epoch"), 3);
  EXPECT_EQ(c.meta.at("rng"), nlohmann::json({1, 2, 3, 4}));
  EXPECT_EQ(c.block("params"), (std::vector<float>{1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(c.block("momentum"), (std::vector<float>{-1.5f}));
  EXPECT_THROW(c.block("missing"), FormatError);
  // Nothing but the file and its marker is left behind.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt_0000000007.bin", "ckpt_0000000007.done"}));
}

TEST_F(CheckpointTest, NewestCompleteWinsAndUnmarkedIsIgnored) {
  write_checkpoint(dir_.string(), make(10, 1), 0);
  write_checkpoint(dir_.string(), make(20, 2), 0);
  // A step-30 file without its marker is what a crash between rename and marker leaves.
  write_checkpoint(dir_.string(), make(30, 3), 0);
  fs::remove(dir_ / "ckpt_0000000030.done");
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<int64_t>{20, 10}));
  auto c = load_latest_checkpoint(dir_.string());
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 20);
}

TEST_F(CheckpointTest, CorruptNewestFallsBackToPrevious) {
  write_checkpoint(dir_.string(), make(10, 1), 0);
  write_checkpoint(dir_.string(), make(20, 2), 0);
  const fs::path p = checkpoint_path(dir_.string(), 20);
  auto bytes = read_bytes(p);
  bytes[bytes.size() - 6] ^= 0x40;  // one bit in the data
  write_bytes(p, bytes);
  EXPECT_THROW(read_checkpoint(p.string()), FormatError);
  std::vector<std::string> skipped;
  auto c = load_latest_checkpoint(dir_.string(), &skipped);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 10);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("checksum"), std::string::npos) << skipped[0];
}

TEST_F(CheckpointTest, EveryTruncatedPrefixIsRejected) {
  write_checkpoint(dir_.string(), make(5, 9), 0);
  const fs::path p = checkpoint_path(dir_.string(), 5);
  const auto bytes = read_bytes(p);
  const fs::path q = dir_ / "truncated.bin";
  for (size_t len = 0; len < bytes.size(); ++len) {
    write_bytes(q, std::vector<char>(bytes.begin(), bytes.begin() + len));
    EXPECT_THROW(read_checkpoint(q.string()), FormatError) << "prefix of " << len << " bytes";
  }
  // And one byte too many.
  auto longer = bytes;
  longer.push_back(0);
  write_bytes(q, longer);
  EXPECT_THROW(read_checkpoint(q.string()), FormatError);
}

TEST_F(CheckpointTest, MagicAndVersionAreCheckedFirst) {
  write_checkpoint(dir_.string(), make(5, 9), 0);
  const fs::path p = checkpoint_path(dir_.string(), 5);
  auto bytes = read_bytes(p);
  auto bad_magic = bytes;
  bad_magic[0] = 'X';
  write_bytes(p, bad_magic);
  try {
    read_checkpoint(p.string());
    ADD_FAILURE() << "bad magic accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos) << e.what();
  }
  auto bad_version = bytes;
  bad_version[8] = 9;
  write_bytes(p, bad_version);
  try {
    read_checkpoint(p.string());
    ADD_FAILURE() << "bad version accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("version 9"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, KeepsOnlyTheNewest) {
  for (int s = 1; s <= 5; ++s) write_checkpoint(dir_.string(), make(s * 10, s), 2);
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<int64_t>{50, 40}));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_.string(), 30)));
}

TEST_F(CheckpointTest, LeftoversOfAKilledWriterAreRemoved) {
  fs::create_directories(dir_);
  write_bytes(dir_ / "ckpt_0000000009.bin.tmp.4242", {'x', 'y'});
  write_bytes(dir_ / "unrelated.tmp.1", {'z'});
  write_checkpoint(dir_.string(), make(10, 1), 0);
  EXPECT_FALSE(fs::exists(dir_ / "ckpt_0000000009.bin.tmp.4242"));
  EXPECT_TRUE(fs::exists(dir_ / "unrelated.tmp.1"));  // not ours to delete
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<int64_t>{10}));
}

TEST_F(CheckpointTest, EmptyOrMissingDirectoryHasNone) {
  EXPECT_TRUE(list_checkpoints(dir_.string()).empty());
  EXPECT_FALSE(load_latest_checkpoint(dir_.string()).has_value());
}

TEST_F(CheckpointTest, UnwritableDirectoryThrowsAndLeavesNoMarker) {
  fs::create_directories(dir_);
  write_bytes(dir_ / "plainfile", {'x'});
  EXPECT_THROW(write_checkpoint((dir_ / "plainfile" / "sub").string(), make(1, 1), 0),
               std::runtime_error);
}

}  // namespace
}  // namespace cohort::train
