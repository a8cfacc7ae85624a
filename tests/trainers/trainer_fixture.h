// Shared set-up of the trainer-level tests: a scratch directory, a small text corpus, and reading
// a run's final weights back from its checkpoint.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/train/checkpoint.h"
#include "cohort/train/fmnist_data.h"
#include "cohort/train/rng.h"

namespace cohort::train::testing {
namespace fs = std::filesystem;

// Where the Fashion-MNIST IDX files are: $COHORT_FMNIST_DIR when set (scripts/gpu_check.sh points
// it at its bundle), else the dataset-fashion-mnist package's folder.
inline std::string fmnist_dir() {
  const char* env = std::getenv("COHORT_FMNIST_DIR");
  return env != nullptr && *env != '\0' ? env : kDefaultFmnistDir;
}

// True iff fmnist_dir() holds the training images (gzipped, as Debian ships them, or plain).
inline bool have_fmnist() {
  const std::string d = fmnist_dir();
  return fs::exists(d + "/train-images-idx3-ubyte.gz") ||
         fs::exists(d + "/train-images-idx3-ubyte");
}

// What stop_after()'s hook throws.
struct StoppedForTest {};

// A per-step hook (FmnistOptions/GptOptions::on_step) that throws StoppedForTest after the
// `steps`-th step of this call, once that step's checkpoint is written: the run ends there as a
// killed worker does, with its options (max_steps, and so its learning-rate schedule) untouched.
inline std::function<void()> stop_after(int64_t steps) {
  auto done = std::make_shared<int64_t>(0);
  return [done, steps] {
    if (++*done == steps) throw StoppedForTest{};
  };
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "cohort_trainer_test_";
    name.append(std::to_string(::getpid())).append("_").append(info->test_suite_name());
    name.append("_").append(info->name());
    dir_ = fs::temp_directory_path() / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string fmnist_dir() { return testing::fmnist_dir(); }
  static bool have_fmnist() { return testing::have_fmnist(); }

  // A deterministic English-like corpus: words drawn from a small vocabulary with Zipf-ish odds,
  // so a language model has something to learn quickly.
  std::string write_corpus(size_t bytes, uint64_t seed = 1) const {
    static const char* words[] = {"the", "cat", "sat", "on", "a",   "mat",   "and", "dog",
                                  "ran", "to",  "it",  "is", "big", "small", "red", "house"};
    Rng rng(seed);
    std::string text;
    while (text.size() < bytes) {
      const uint64_t r = rng.next_u64();
      // A third of the words come from all 16, the rest from the 4 most common.
      const uint64_t w = (r >> 8) % 3 == 0 ? r % 16 : (r >> 16) % 4;
      text.append(words[w]);
      text.append((r >> 24) % 9 == 0 ? ".\n" : " ");
    }
    text.resize(bytes);
    const std::string p = path("corpus.txt");
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

  // The "params" block of the newest checkpoint in `dir`.
  static std::vector<float> final_params(const std::string& dir, const char* block = "params") {
    auto c = load_latest_checkpoint(dir);
    EXPECT_TRUE(c.has_value()) << "no checkpoint in " << dir;
    return c ? c->block(block) : std::vector<float>{};
  }

  fs::path dir_;
};

}  // namespace cohort::train::testing
