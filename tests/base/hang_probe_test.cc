// The hang probe's contract (cohort/base/hang_probe.h): questions and answers on the control
// socket, as libcohort writes them and cohortrun reads them.
#include "cohort/base/hang_probe.h"

#include <gtest/gtest.h>

#include "cohort/error.h"

namespace cohort::hang_probe {
namespace {

TEST(HangProbe, AQuestionParsesBackToItsId) {
  EXPECT_EQ(encode_request(42), "P 42\n");
  EXPECT_EQ(parse_request("P 42"), 42);
  for (const char* bad : {"", "P", "P ", "P -1", "P 4x", "Q 4", "P  4", "P 99999999999999999999"})
    EXPECT_FALSE(parse_request(bad).has_value()) << bad;
}

TEST(HangProbe, AnAnswerRoundTrips) {
  ProbeAnswer a;
  a.id = 7;
  a.pid = 4242;
  a.time = 1764790000.25;
  a.threads = {{"MainThread",
                true,
                {{"train.py", 12, "<module>", "loss.backward()"}, {"train.py", 30, "step", ""}}},
               {"pin", false, {}}};
  a.torch = "2.15.0";
  a.groups = {{"0", "gloo", {0, 1, 2}, 26}, {"1", "gloo", {0, 2}, std::nullopt}};
  a.flight_recorder = true;
  CollectiveEntry c;
  c.group = "0";
  c.seq = 26;
  c.op = "all_reduce";
  c.in_sizes = "[[520]]";
  c.out_sizes = "[[520]]";
  c.dtypes = "[\"Float\"]";
  c.state = "scheduled";
  c.since = 1764789988.5;
  c.timeout_s = 1800;
  a.collectives = {c};
  a.errors = {"one thing"};
  const std::string line = encode_answer(a);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line
  ProbeAnswer b = parse_answer(line.substr(0, line.size() - 1));
  EXPECT_EQ(b.id, 7);
  EXPECT_EQ(b.pid, 4242);
  EXPECT_DOUBLE_EQ(b.time, a.time);
  ASSERT_EQ(b.threads.size(), 2u);
  EXPECT_TRUE(b.threads[0].main);
  EXPECT_EQ(b.threads[0].frames[0].source, "loss.backward()");
  EXPECT_EQ(b.threads[0].frames[1].line, 30);
  EXPECT_EQ(b.torch, "2.15.0");
  ASSERT_EQ(b.groups.size(), 2u);
  EXPECT_EQ(b.groups[0].ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(b.groups[0].seq, 26);
  EXPECT_FALSE(b.groups[1].seq.has_value());
  EXPECT_TRUE(b.flight_recorder);
  ASSERT_EQ(b.collectives.size(), 1u);
  EXPECT_EQ(b.collectives[0].op, "all_reduce");
  EXPECT_EQ(b.collectives[0].in_sizes, "[[520]]");
  EXPECT_EQ(b.collectives[0].dtypes, "[\"Float\"]");
  EXPECT_FALSE(b.collectives[0].done);
  EXPECT_DOUBLE_EQ(b.collectives[0].since, c.since);
  EXPECT_EQ(b.errors, a.errors);
}

TEST(HangProbe, PyTorchsOperationPrefixIsDroppedAndUnknownFieldsIgnored) {
  ProbeAnswer a = parse_answer(
      R"({"v": 1, "id": 3, "pid": 9, "time": 1.5, "later": {"x": 1},
          "threads": [{"name": "T", "main": true, "frames": [["f.py", null, "g", ""]]}],
          "collectives": [{"pg": "0", "seq": 2, "op": "nccl:all_gather", "done": true}]})");
  EXPECT_EQ(a.collectives[0].op, "all_gather");
  EXPECT_TRUE(a.collectives[0].done);
  EXPECT_EQ(a.threads[0].frames[0].line, 0);  // Python gives no line for some frames
  EXPECT_FALSE(a.torch.has_value());
  EXPECT_TRUE(a.groups.empty());
  // Only a prefix before a plain name: reading what encode_answer wrote of a parsed answer gives
  // the same operation again (the hang_answer fuzzer found "gloo:a:[_reduce" read twice).
  ProbeAnswer odd = parse_answer(R"({"collectives": [{"op": "gloo:a:b"}]})");
  EXPECT_EQ(odd.collectives[0].op, "gloo:a:b");
  const std::string line = encode_answer(odd);
  EXPECT_EQ(parse_answer(line.substr(0, line.size() - 1)).collectives[0].op, "gloo:a:b");
}

TEST(HangProbe, MalformedAnswersAreRefusedByName) {
  for (const char* bad :
       {"", "nope", "[1]", R"({"id": "seven"})", R"({"threads": [{"frames": [["f.py"]]}]})",
        R"({"groups": [{"ranks": "0,1"}]})"}) {
    try {
      parse_answer(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("hang probe"), std::string::npos) << e.what();
    }
  }
}

TEST(HangProbe, ANumberThatIsNoWholeNumberOfItsTypeIsRefusedNotConverted) {
  // Converting a fraction or a number past an int's range is undefined behaviour: a worker's
  // answer may hold anything (the hang_answer fuzzer found a line number of 2.2e60).
  for (const char* bad :
       {R"({"pid": 2.5})", R"({"pid": 1e300})", R"({"pid": 4294967296})",
        R"({"id": 18446744073709551615})", R"({"threads": [{"frames": [["f.py", 2.22e60, "g"]]}]})",
        R"({"threads": [{"frames": [["f.py", -4294967296, "g"]]}]})",
        R"({"groups": [{"ranks": [0, 1.5]}]})", R"({"groups": [{"ranks": [0, 3000000000]}]})",
        R"({"collectives": [{"seq": 0.5}]})"}) {
    try {
      parse_answer(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("is malformed"), std::string::npos) << e.what();
    }
  }
  // The largest that fit are read as they are; a group's count past int64 is unknown.
  const ProbeAnswer a = parse_answer(
      R"({"pid": 2147483647, "id": 9223372036854775807, "groups": [{"seq": 18446744073709551615}],)"
      R"( "threads": [{"frames": [["f.py", -2147483648, "g"]]}]})");
  EXPECT_EQ(a.pid, 2147483647);
  EXPECT_EQ(a.id, INT64_MAX);
  EXPECT_FALSE(a.groups.at(0).seq.has_value());
  EXPECT_EQ(a.threads.at(0).frames.at(0).line, INT32_MIN);
}

TEST(HangProbe, InvalidUtf8InAnAnswerIsReplacedNotThrown) {
  ProbeAnswer a;
  a.threads = {{"T", true, {{std::string("bad\xff.py"), 1, "f", ""}}}};
  const std::string line = encode_answer(a);
  EXPECT_NE(parse_answer(line.substr(0, line.size() - 1)).threads[0].frames[0].file.find("bad"),
            std::string::npos);
}

}  // namespace
}  // namespace cohort::hang_probe
