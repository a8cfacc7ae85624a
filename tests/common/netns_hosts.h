// Test helper: the network-namespace "hosts" of a test suite, made by scripts/cluster/netns_up.sh
// and removed by netns_down.sh, both configured by `env` (COHORT_NETNS_PREFIX, _SUBNET, _NODES).
// For SetUpTestSuite/TearDownTestSuite: up() is false without root or iproute2, and the suite's
// tests then skip.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace cohort::testing {

inline bool netns_hosts_up(const char* env) {
  if (::geteuid() != 0) return false;
  const std::string up =
      std::string(env) + " " + COHORT_SOURCE_DIR + "/scripts/cluster/netns_up.sh >/dev/null";
  return std::system(up.c_str()) == 0;
}

inline void netns_hosts_down(const char* env) {
  const std::string down =
      std::string(env) + " " + COHORT_SOURCE_DIR + "/scripts/cluster/netns_down.sh >/dev/null";
  (void)std::system(down.c_str());
}

}  // namespace cohort::testing
