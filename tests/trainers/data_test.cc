// Fashion-MNIST IDX reading (synthetic files, and Debian's when installed) and the text loader.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "cohort/train/fmnist_data.h"
#include "cohort/train/text_data.h"
#include "trainer_fixture.h"

namespace cohort::train {
namespace {
namespace fs = std::filesystem;

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("cohort_data_test_" + std::to_string(::getpid()) + tag);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_gz(const fs::path& p, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

std::vector<uint8_t> be32(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

// A 3-image IDX pair: image i has every pixel equal to 100 * i, label 7 - i.
void write_tiny_fmnist(const fs::path& dir, const std::string& prefix, bool gz = true) {
  std::vector<uint8_t> img, lbl;
  for (uint32_t v : {0x803u, 3u, 28u, 28u}) {
    auto b = be32(v);
    img.insert(img.end(), b.begin(), b.end());
  }
  for (int i = 0; i < 3; ++i) img.insert(img.end(), 784, uint8_t(100 * i));
  for (uint32_t v : {0x801u, 3u}) {
    auto b = be32(v);
    lbl.insert(lbl.end(), b.begin(), b.end());
  }
  for (int i = 0; i < 3; ++i) lbl.push_back(uint8_t(7 - i));
  if (gz) {
    write_gz(dir / (prefix + "-images-idx3-ubyte.gz"), img);
    write_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), lbl);
  } else {
    std::ofstream(dir / (prefix + "-images-idx3-ubyte"), std::ios::binary)
        .write(reinterpret_cast<const char*>(img.data()), img.size());
    std::ofstream(dir / (prefix + "-labels-idx1-ubyte"), std::ios::binary)
        .write(reinterpret_cast<const char*>(lbl.data()), lbl.size());
  }
}

TEST(FmnistData, ReadsGzipAndPlainIdxAndNormalises) {
  const fs::path dir = temp_dir("idx");
  write_tiny_fmnist(dir, "train", true);
  write_tiny_fmnist(dir, "t10k", false);
  for (const char* split : {"train", "test"}) {
    const FmnistSplit s = load_fmnist(dir.string(), split);
    ASSERT_EQ(s.count, 3);
    EXPECT_EQ(s.labels, (std::vector<int32_t>{7, 6, 5}));
    const size_t idx[] = {2, 0};
    std::vector<float> x(2 * 784);
    std::vector<int32_t> y(2);
    gather_fmnist(s, idx, 2, x.data(), y.data());
    EXPECT_EQ(y, (std::vector<int32_t>{5, 7}));
    EXPECT_FLOAT_EQ(x[0], (200.0f / 255.0f - 0.2860f) / 0.3530f);
    EXPECT_FLOAT_EQ(x[783], (200.0f / 255.0f - 0.2860f) / 0.3530f);
    EXPECT_FLOAT_EQ(x[784], (0.0f - 0.2860f) / 0.3530f);
  }
  fs::remove_all(dir);
}

TEST(FmnistData, LimitReadsOnlyTheFirstItems) {
  const fs::path dir = temp_dir("limit");
  write_tiny_fmnist(dir, "train", true);
  const FmnistSplit s = load_fmnist(dir.string(), "train", 2);
  EXPECT_EQ(s.count, 2);
  EXPECT_EQ(s.images.size(), 2u * 784);
  EXPECT_EQ(s.labels, (std::vector<int32_t>{7, 6}));
  EXPECT_EQ(load_fmnist(dir.string(), "train", 10).count, 3);  // more than there are
  fs::remove_all(dir);
}

TEST(FmnistData, MissingFilesNameThePackage) {
  const fs::path dir = temp_dir("missing");
  try {
    load_fmnist(dir.string(), "train");
    ADD_FAILURE() << "no error for a directory without data";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
    EXPECT_NE(msg.find("train-images-idx3-ubyte"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
  }
  fs::remove_all(dir);
}

TEST(FmnistData, TruncatedFileIsRejected) {
  const fs::path dir = temp_dir("trunc");
  write_tiny_fmnist(dir, "train", false);
  fs::resize_file(dir / "train-images-idx3-ubyte", 16 + 784 * 2);
  EXPECT_THROW(load_fmnist(dir.string(), "train"), std::runtime_error);
  fs::remove_all(dir);
}

TEST(FmnistData, DebianPackageWhenInstalled) {
  const std::string dir = testing::fmnist_dir();
  if (!fs::exists(dir + "/t10k-labels-idx1-ubyte.gz") &&
      !fs::exists(dir + "/t10k-labels-idx1-ubyte")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (nor COHORT_FMNIST_DIR set)";
  }
  const FmnistSplit test = load_fmnist(dir, "test");
  EXPECT_EQ(test.count, 10000);
  std::vector<int> per_class(10, 0);
  for (int32_t l : test.labels) per_class.at(l)++;
  for (int c : per_class) EXPECT_EQ(c, 1000);  // Fashion-MNIST's test set is balanced
}

std::vector<int32_t> iota_tokens(size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(i % 251);
  return t;
}

TEST(TextLoader, RanksReadDisjointSlicesOfTheOneRankBatch) {
  const auto tokens = iota_tokens(1000);
  const int B = 2, T = 8;
  TextLoader one(tokens, 2 * B, T, 0, 1);
  TextLoader r0(tokens, B, T, 0, 2), r1(tokens, B, T, 1, 2);
  for (int step = 0; step < 20; ++step) {  // spans several wrap-arounds
    std::vector<int32_t> x(2 * B * T), y(2 * B * T), x0(B * T), y0(B * T), x1(B * T), y1(B * T);
    one.next(x.data(), y.data());
    r0.next(x0.data(), y0.data());
    r1.next(x1.data(), y1.data());
    std::vector<int32_t> joined = x0;
    joined.insert(joined.end(), x1.begin(), x1.end());
    ASSERT_EQ(joined, x) << "step " << step;
    EXPECT_EQ(one.global_position(), r0.global_position());
    EXPECT_EQ(r1.global_position(), r0.global_position());
  }
}

TEST(TextLoader, TargetsAreInputsShiftedByOne) {
  const auto tokens = iota_tokens(300);
  TextLoader l(tokens, 2, 5, 0, 1);
  std::vector<int32_t> x(10), y(10);
  l.next(x.data(), y.data());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(y[i], tokens[i + 1]);
  l.next(x.data(), y.data());
  EXPECT_EQ(x[0], tokens[10]);
}

TEST(TextLoader, GlobalPositionCarriesAcrossWorldSizes) {
  const auto tokens = iota_tokens(5000);
  TextLoader a(tokens, 2, 8, 0, 2);
  std::vector<int32_t> x(16), y(16);
  for (int i = 0; i < 5; ++i) a.next(x.data(), y.data());
  const int64_t pos = a.global_position();
  EXPECT_EQ(pos, 5 * 2 * 16);
  TextLoader b(tokens, 4, 8, 0, 1);
  b.set_global_position(pos);
  std::vector<int32_t> xb(32), yb(32);
  b.next(xb.data(), yb.data());
  EXPECT_EQ(xb[0], tokens[pos]);
  // A position past the end starts over.
  b.set_global_position(4990);
  EXPECT_EQ(b.global_position(), 0);
}

TEST(TextLoader, TooShortTextIsAnError) {
  const auto tokens = iota_tokens(100);
  EXPECT_THROW(TextLoader(tokens, 4, 16, 0, 2), UsageError);
}

TEST(TextData, DirectoryConcatenatesPlainFilesAndSplits) {
  const fs::path dir = temp_dir("text");
  std::ofstream(dir / "b") << "BBBB";
  std::ofstream(dir / "a") << "AAAAAA";
  std::ofstream(dir / "a.dat") << "index";
  const auto bytes = load_text(dir.string());
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "AAAAAABBBB");
  const TextSplit s = split_text(bytes);
  EXPECT_EQ(s.train.size(), 9u);
  EXPECT_EQ(s.val.size(), 1u);
  EXPECT_EQ(s.val[0], 'B');
  EXPECT_THROW(load_text((dir / "nothing").string()), std::runtime_error);
  fs::remove_all(dir);
}

TEST(TextData, FortunesWhenInstalled) {
  if (!fs::exists(std::string(kDefaultTextDir) + "/fortunes")) {
    GTEST_SKIP() << "the fortunes package is not installed";
  }
  const auto bytes = load_text("");
  EXPECT_GT(bytes.size(), 1000000u);
  std::set<uint8_t> distinct(bytes.begin(), bytes.end());
  EXPECT_GT(distinct.size(), 60u);
}

}  // namespace
}  // namespace cohort::train
