// The heartbeat pipe's contract (cohort/base/heartbeat_line.h): what a worker writes, cohortrun
// reads back, in whatever pieces the pipe delivers.
#include "cohort/base/heartbeat_line.h"

#include <gtest/gtest.h>

namespace cohort::heartbeat_pipe {
namespace {

TEST(HeartbeatLine, AnEncodedReportParsesBackToItsValues) {
  StepReport r{123456789, 0.0123456, 98765.4, 0.000321};
  const std::string line = encode_step_report(r);
  EXPECT_EQ(line, "S 123456789 0.0123456 98765.4 0.000321\n");
  HeartbeatParser p;
  EXPECT_TRUE(p.feed(line));
  ASSERT_TRUE(p.last_step().has_value());
  EXPECT_EQ(p.last_step()->step, r.step);
  EXPECT_DOUBLE_EQ(p.last_step()->step_s, r.step_s);
  EXPECT_DOUBLE_EQ(p.last_step()->items_per_s, r.items_per_s);
  EXPECT_DOUBLE_EQ(p.last_step()->comm_s, r.comm_s);
  EXPECT_EQ(p.malformed(), 0u);
}

TEST(HeartbeatLine, BeatsAndReportsCutAnywhereAreRead) {
  HeartbeatParser s;
  EXPECT_TRUE(s.feed(std::string(2, kBeat)));
  EXPECT_FALSE(s.last_step().has_value());
  const std::string line = "S 42 0.25 128 0.05\n";
  // Cut at every byte: the report is put back together, and the part before its end is no beat.
  for (size_t cut = 1; cut < line.size(); ++cut) {
    HeartbeatParser t;
    EXPECT_FALSE(t.feed(line.substr(0, cut))) << cut;
    EXPECT_TRUE(t.feed(line.substr(cut))) << cut;
    ASSERT_TRUE(t.last_step().has_value()) << cut;
    EXPECT_EQ(t.last_step()->step, 42);
    EXPECT_DOUBLE_EQ(t.last_step()->step_s, 0.25);
    EXPECT_DOUBLE_EQ(t.last_step()->items_per_s, 128);
    EXPECT_DOUBLE_EQ(t.last_step()->comm_s, 0.05);
  }
  EXPECT_TRUE(s.feed("bS 43 0.5 64 0.1\nb"));
  EXPECT_EQ(s.last_step()->step, 43);
}

TEST(HeartbeatLine, TheWorkerModulesOwnBeatsAndReportsAreNotBeatsByHand) {
  // The module's beats on optimizer steps ('a', "A ...") keep the worker alive but promise no beat
  // in a phase without steps; anything else is the script's own.
  HeartbeatParser module;
  EXPECT_TRUE(module.feed(std::string(1, kModuleBeat)));
  EXPECT_TRUE(module.feed("A 7 0.25 128 0.05\n"));
  ASSERT_TRUE(module.last_step().has_value());
  EXPECT_EQ(module.last_step()->step, 7);
  EXPECT_EQ(module.malformed(), 0u);
  EXPECT_FALSE(module.beaten_by_hand());
  EXPECT_FALSE(module.feed("H 1 10 probe\n"));
  EXPECT_FALSE(module.beaten_by_hand());  // a hello is no beat at all
  module.feed("A 8 0.25 128 0.05\nS 9 0.25 128 0.05\n");
  EXPECT_TRUE(module.beaten_by_hand());
  EXPECT_EQ(module.last_step()->step, 9);

  for (const std::string& by_hand : {std::string(1, kBeat), std::string("x")}) {
    HeartbeatParser p;
    EXPECT_TRUE(p.feed(std::string(1, kModuleBeat) + by_hand));
    EXPECT_TRUE(p.beaten_by_hand()) << by_hand;
  }
  // A malformed report by hand is no beat, and so not one by hand either.
  HeartbeatParser bad;
  EXPECT_FALSE(bad.feed("S nonsense\n"));
  EXPECT_FALSE(bad.beaten_by_hand());
}

TEST(HeartbeatLine, MalformedAndOverlongLinesAreDroppedWhole) {
  HeartbeatParser s;
  s.feed("S 1 0.1 10 0.01\n");
  s.feed("S nonsense\n");
  s.feed("S 2 -0.1 10 0.01\n");
  s.feed("S 3 0.1 10 0.01 trailing\n");
  s.feed("S " + std::string(10000, '7') + "\n");
  EXPECT_EQ(s.malformed(), 4u);
  EXPECT_EQ(s.last_step()->step, 1);  // the last good one stands
  s.feed("S 4 0.1 10 0.01\n");
  EXPECT_EQ(s.last_step()->step, 4);
}

TEST(HeartbeatLine, AHelloParsesBackAndIsNoBeat) {
  Hello h;
  h.pid = 4242;
  h.features = {kProbeFeature, "later"};
  const std::string line = encode_hello(h);
  EXPECT_EQ(line, "H 1 4242 probe,later\n");
  HeartbeatParser p;
  // A worker that only said hello has not beaten: the beat rule must not judge it.
  EXPECT_FALSE(p.feed(line));
  ASSERT_TRUE(p.hello().has_value());
  EXPECT_EQ(p.hello()->version, kHelloVersion);
  EXPECT_EQ(p.hello()->pid, 4242);
  EXPECT_TRUE(p.hello()->has("probe"));
  EXPECT_FALSE(p.hello()->has("prob"));
  EXPECT_EQ(encode_hello(Hello{kHelloVersion, 7, {}}), "H 1 7 -\n");
  // Cut anywhere between beats and a report, the hello still parses and the beats still count.
  const std::string mixed = "b" + line + "S 5 0.1 0 0\nb";
  for (size_t cut = 1; cut < mixed.size(); ++cut) {
    HeartbeatParser t;
    t.feed(mixed.substr(0, cut));
    t.feed(mixed.substr(cut));
    ASSERT_TRUE(t.hello().has_value()) << cut;
    EXPECT_EQ(t.hello()->pid, 4242) << cut;
    ASSERT_TRUE(t.last_step().has_value()) << cut;
    EXPECT_EQ(t.last_step()->step, 5) << cut;
    EXPECT_EQ(t.malformed(), 0u) << cut;
  }
}

TEST(HeartbeatLine, AMalformedHelloIsDroppedAndKeepsTheLastGoodOne) {
  HeartbeatParser p;
  p.feed("H 1 10 -\n");
  for (const char* bad : {"H\n", "H 1\n", "H 1 0 -\n", "H 0 5 -\n", "H 1 5 a,,b\n",
                          "H 1 5 probe extra\n", "H x 5 -\n"}) {
    p.feed(bad);
  }
  EXPECT_EQ(p.malformed(), 7u);
  EXPECT_EQ(p.hello()->pid, 10);
  EXPECT_FALSE(p.feed("H 1 " + std::string(200, '9') + " -\n"));
  EXPECT_EQ(p.malformed(), 8u);
}

}  // namespace
}  // namespace cohort::heartbeat_pipe
