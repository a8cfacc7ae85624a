// Small files a user names, read only when regular and small: a FIFO, a device, a directory, a
// large file or (when asked) a link are refused at once, naming the path.
#include "cohort/base/regular_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cohort/error.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;

class RegularFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort_regular_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  // The UsageError reading `path` raises ("" when none).
  std::string refusal(const std::string& path, RegularFileLimits limits = {}) {
    try {
      read_regular_file(path, "the token file", limits);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(RegularFileTest, ARegularFileIsReadWhole) {
  const std::string p = write("token", std::string("abc\0def\n", 8));
  EXPECT_EQ(read_regular_file(p, "the token file"), std::string("abc\0def\n", 8));
  EXPECT_EQ(read_regular_file(write("empty", ""), "the token file"), "");
  const std::string exact = write("exact", std::string(64 * 1024, 'x'));
  EXPECT_EQ(read_regular_file(exact, "the token file").size(), 64u * 1024);
}

TEST_F(RegularFileTest, WhatIsNotARegularFileIsRefusedAtOnceNamingIt) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& p : {fifo, std::string("/dev/zero"), dir_.string()}) {
    const std::string why = refusal(p);  // never blocks, never reads without bound
    EXPECT_NE(why.find(p), std::string::npos) << why;
    EXPECT_NE(why.find("the token file"), std::string::npos) << why;
  }
}

TEST_F(RegularFileTest, AFileOverTheLimitIsRefusedUnread) {
  const std::string big = write("big", std::string(64 * 1024 + 1, 'x'));
  EXPECT_NE(refusal(big).find(big), std::string::npos);
  EXPECT_NE(refusal(write("small", "12345"), RegularFileLimits{4, true}), "");
  EXPECT_EQ(refusal(write("fits", "1234"), RegularFileLimits{4, true}), "");
}

TEST_F(RegularFileTest, LinksAreFollowedToWhatTheyNameUnlessNot) {
  const std::string target = write("secret", "s3cret");
  const std::string link = (dir_ / "link").string();
  fs::create_symlink(target, link);
  EXPECT_EQ(read_regular_file(link, "the token file"), "s3cret");  // a mounted secret
  EXPECT_NE(refusal(link, RegularFileLimits{64 * 1024, false}).find(link), std::string::npos);
  const std::string to_zero = (dir_ / "zero").string();
  fs::create_symlink("/dev/zero", to_zero);
  EXPECT_NE(refusal(to_zero), "");  // what the link names is judged
}

TEST_F(RegularFileTest, AMissingFileIsAnIoError) {
  try {
    read_regular_file((dir_ / "missing").string(), "the token file");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "missing").string()), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort
