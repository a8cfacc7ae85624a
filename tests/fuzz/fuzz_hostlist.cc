// fuzz_hostlist: the Slurm hostlist grammar and per-node counts (cohort::slurm).
//
// The input is the text of SLURM_JOB_NODELIST (and, the same bytes, SLURM_TASKS_PER_NODE).
// expand_hostlist() and expand_counts() may reject it only with cohort::UsageError; any other
// exception, a crash, a leak or an allocation past libFuzzer's limit is a bug. On success:
//   - at most max_hosts names, none empty, none holding a separator or a bracket;
//   - the names joined with ',' expand to the same names (an expansion is a fixed point);
//   - counts are in [0, 2^30].
// Seeds: tests/fuzz/corpus/hostlist/ (docs/SLURM.md §4.2 and the inputs that broke other
// parsers).
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cohort/base/slurm.h"
#include "fuzz_check.h"

namespace {

void check_hostlist(const std::string& text, size_t max_hosts) {
  std::vector<std::string> hosts;
  try {
    hosts = cohort::slurm::expand_hostlist(text, max_hosts);
  } catch (const cohort::UsageError& e) {
    COHORT_FUZZ_CHECK(e.what()[0] != '\0', "rejected without a reason");
    return;
  }
  COHORT_FUZZ_CHECK(hosts.size() <= max_hosts, "%zu hosts, max %zu", hosts.size(), max_hosts);
  std::string joined;
  for (const std::string& h : hosts) {
    COHORT_FUZZ_CHECK(!h.empty(), "an empty host name");
    for (char c : h) {
      COHORT_FUZZ_CHECK(
          c != ',' && c != '[' && c != ']' && !std::isspace(static_cast<unsigned char>(c)),
          "host '%s' holds a separator", h.c_str());
    }
    if (!joined.empty()) joined += ',';
    joined += h;
  }
  std::vector<std::string> again = cohort::slurm::expand_hostlist(joined, max_hosts);
  COHORT_FUZZ_CHECK(again == hosts, "'%s' expands to %zu names, re-expanded to %zu", text.c_str(),
                    hosts.size(), again.size());
}

void check_counts(const std::string& text) {
  std::vector<int> counts;
  try {
    counts = cohort::slurm::expand_counts(text);
  } catch (const cohort::UsageError& e) {
    COHORT_FUZZ_CHECK(e.what()[0] != '\0', "rejected without a reason");
    return;
  }
  for (int c : counts) COHORT_FUZZ_CHECK(c >= 0 && c <= (1 << 30), "count %d", c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  check_hostlist(text, 4096);
  check_hostlist(text, 1 + size % 8);  // the bound itself
  check_counts(text);
  return 0;
}
