// --rdzv-conf: torchrun's rendezvous settings ("k=v,k=v"), parsed once.
#include "plan/rdzv_conf.h"

#include <gtest/gtest.h>

#include "cohort/error.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

std::string usage_error(const std::string& text) {
  try {
    parse_rdzv_conf(text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(RdzvConf, TorchrunsDefaults) {
  const RdzvConf c = parse_rdzv_conf("");
  EXPECT_EQ(c.join_timeout, 600s);
  EXPECT_EQ(c.last_call_timeout, 30s);
  EXPECT_EQ(c.close_timeout, 30s);
  EXPECT_EQ(c.keep_alive_interval, 5s);
  EXPECT_EQ(c.keep_alive_max_attempt, 3);
  EXPECT_EQ(c.node_info_timeout, 60s);
  EXPECT_FALSE(c.is_host);
  EXPECT_EQ(c.liveness_timeout(), 15s);
}

TEST(RdzvConf, EveryKeyInSecondsWithFractions) {
  const RdzvConf c = parse_rdzv_conf(
      "join_timeout=120,last_call_timeout=0.5,close_timeout=2,keep_alive_interval=0.25,"
      "keep_alive_max_attempt=4,timeout=7,is_host=false");
  EXPECT_EQ(c.join_timeout, 120s);
  EXPECT_EQ(c.last_call_timeout, 500ms);
  EXPECT_EQ(c.close_timeout, 2s);
  EXPECT_EQ(c.keep_alive_interval, 250ms);
  EXPECT_EQ(c.keep_alive_max_attempt, 4);
  EXPECT_EQ(c.node_info_timeout, 7s);
  ASSERT_TRUE(c.is_host);
  EXPECT_FALSE(*c.is_host);
  EXPECT_EQ(c.liveness_timeout(), 1s);
  EXPECT_EQ(parse_rdzv_conf("read_timeout=9").node_info_timeout, 9s);  // torchrun 2.x's name
}

TEST(RdzvConf, BooleansInEveryUsualSpelling) {
  for (const char* yes : {"1", "true", "True", "yes"})
    EXPECT_TRUE(*parse_rdzv_conf(std::string("is_host=") + yes).is_host) << yes;
  for (const char* no : {"0", "false", "False", "no"})
    EXPECT_FALSE(*parse_rdzv_conf(std::string("is_host=") + no).is_host) << no;
  EXPECT_NE(usage_error("is_host=maybe").find("is_host=maybe is not true or false"),
            std::string::npos);
}

TEST(RdzvConf, KeysCohortrunDoesNotNeedAreAcceptedAndEmptyItemsSkipped) {
  const RdzvConf c = parse_rdzv_conf(",store_type=HashStore,,heartbeat_timeout=nonsense,");
  EXPECT_EQ(c.join_timeout, 600s);
}

TEST(RdzvConf, KeepAliveNeverBecomesZero) {
  const RdzvConf c = parse_rdzv_conf("keep_alive_interval=0,keep_alive_max_attempt=0");
  EXPECT_EQ(c.keep_alive_interval, 1ms);
  EXPECT_EQ(c.keep_alive_max_attempt, 1);
}

TEST(RdzvConf, ErrorsNameTheItemAndWhatIsAllowed) {
  EXPECT_NE(usage_error("join_timeout").find("'join_timeout' is not key=value"), std::string::npos);
  EXPECT_NE(usage_error("join_timeout=-1").find("join_timeout=-1 is not a number >= 0"),
            std::string::npos);
  EXPECT_NE(usage_error("close_timeout=soon").find("close_timeout=soon"), std::string::npos);
  const std::string unknown = usage_error("join_timout=5");
  EXPECT_NE(unknown.find("unknown key 'join_timout'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("join_timeout, last_call_timeout"), std::string::npos) << unknown;
  EXPECT_EQ(unknown.rfind("--rdzv-conf: ", 0), 0u);
}

}  // namespace
}  // namespace cohort::launch
