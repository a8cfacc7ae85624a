// The error file's contract (cohort/base/error_file_format.h): what libcohort writes, cohortrun
// reads back; both of torchrun's formats; the copy a launcher leaves for its own launcher.
#include "cohort/base/error_file_format.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace cohort::error_file {
namespace {

TEST(ErrorFileFormat, WhatTheWorkerWritesTheLauncherReads) {
  const std::string text = encode("ValueError: boom", "frame 1\nframe 2\n", 1700000000);
  Content c = parse(text);
  EXPECT_EQ(c.message, "ValueError: boom");
  EXPECT_EQ(c.traceback, "frame 1\nframe 2\n");
  EXPECT_DOUBLE_EQ(c.timestamp, 1700000000);
  EXPECT_EQ(c.raw, text);
}

TEST(ErrorFileFormat, InvalidUtf8IsReplacedNotThrown) {
  const std::string text = encode("bad \xff\xfe bytes", "\xc3", 1);
  Content c = parse(text);
  EXPECT_EQ(c.message, "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
  EXPECT_EQ(c.traceback, "\xEF\xBF\xBD");
}

TEST(ErrorFileFormat, TorchrunsSecondFormatAndGarbage) {
  Content c = parse(R"({"message": "plain text", "timestamp": 12})");
  EXPECT_EQ(c.message, "plain text");
  EXPECT_DOUBLE_EQ(c.timestamp, 12);
  EXPECT_TRUE(c.traceback.empty());
  for (const char* bad : {"", "{garbage", "[]", R"({"message": 3})", R"({"other": 1})"}) {
    Content g = parse(bad);
    EXPECT_EQ(g.message.rfind("unreadable error file (", 0), 0u) << bad << ": " << g.message;
    EXPECT_TRUE(g.traceback.empty());
  }
}

TEST(ErrorFileFormat, TheParentsCopyKeepsTheChildsFileAndAddsTheExitCode) {
  Content child = parse(encode("RuntimeError: x", "tb", 5));
  auto j = nlohmann::json::parse(encode_for_parent(&child, "ignored", 3, 99));
  EXPECT_EQ(j["message"]["message"], "RuntimeError: x");
  EXPECT_EQ(j["message"]["extraInfo"]["py_callstack"], "tb");
  EXPECT_EQ(j["message"]["errorCode"], 3);

  Content second = parse(R"({"message": "plain", "timestamp": 1})");
  const Content* no_child = nullptr;
  const Content* plain = &second;
  for (const Content* c : {no_child, plain}) {
    auto built = nlohmann::json::parse(encode_for_parent(c, "worker 1 died", 7, 99));
    EXPECT_EQ(built["message"]["message"], "worker 1 died");
    EXPECT_EQ(built["message"]["errorCode"], 7);
    EXPECT_EQ(built["message"]["extraInfo"]["timestamp"], "99");
  }
}

}  // namespace
}  // namespace cohort::error_file
