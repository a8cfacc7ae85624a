// fuzz_hang_answer: what a worker answers to a hang probe (cohort/base/hang_probe.h), read and
// judged by cohortrun (launcher/failure/hang_analysis.h). A worker is the user's code: whatever it
// writes on its control socket must never crash cohortrun or leave it with a verdict it cannot act
// on.
//
// The input: its first byte picks the hang timeout (1-16 s); the rest is up to 4 ranks' lines, one
// per rank, separated by '\n'. A line's first byte is the rank's beat state (bit 0: it beat,
// bit 1: by hand, bit 2: it gave no answer; bits 3-7: its silence, in half seconds); the rest is
// its answer line.
//
// parse_answer() may refuse a line only with cohort::ProtocolError; any other exception, a crash,
// a leak or a sanitizer report is a bug. An answer it accepts is encoded back (what libcohort
// writes) to a line that parses to the same encoding. analyse_hang() over the ranks must not
// throw, and its verdict must be one cohortrun can act on:
//   - hung: at least one culprit, each a rank of the job, and a summary; the time it has lasted
//     finite and not negative (the failure's timestamp is taken from it);
//   - waiting: a time to look again, finite, in [0, the timeout];
// and the summary's report of the culprit (format_failure_report) must print.
// Seeds: tests/fuzz/corpus/hang_answer/ (make_seeds.py: answers of PyTorch 2.x with its Flight
// Recorder, PyTorch 1.13, libcohort; a hang, a desync, a quiet phase).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/base/hang_probe.h"
#include "cohort/error.h"
#include "failure/failure.h"
#include "failure/failure_report.h"
#include "failure/hang_analysis.h"
#include "fuzz_check.h"

namespace {

using namespace cohort;
using namespace cohort::launch;

std::optional<hang_probe::ProbeAnswer> read_answer(std::string_view line) {
  hang_probe::ProbeAnswer a;
  try {
    a = hang_probe::parse_answer(line);
  } catch (const ProtocolError& e) {
    COHORT_FUZZ_CHECK(e.what()[0] != '\0', "refused without a reason");
    return std::nullopt;
  }
  // What libcohort writes for it parses back to the same thing.
  std::string encoded = hang_probe::encode_answer(a);
  COHORT_FUZZ_CHECK(!encoded.empty() && encoded.back() == '\n', "an answer line without its end");
  encoded.pop_back();
  hang_probe::ProbeAnswer again;
  try {
    again = hang_probe::parse_answer(encoded);
  } catch (const ProtocolError& e) {
    COHORT_FUZZ_CHECK(false, "its own encoding refused: %s", e.what());
  }
  COHORT_FUZZ_CHECK(hang_probe::encode_answer(again) == encoded + "\n",
                    "an answer changed on its way through encode and parse");
  (void)format_stacks(a);
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const double timeout_s = 1 + data[0] % 16;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);

  std::vector<RankProbe> ranks;
  size_t start = 0;
  while (start <= rest.size() && ranks.size() < 4) {
    size_t end = rest.find('\n', start);
    if (end == std::string_view::npos) end = rest.size();
    const std::string_view line = rest.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    const auto state = static_cast<uint8_t>(line[0]);
    RankProbe p;
    p.rank = static_cast<int>(ranks.size());
    p.node_rank = p.rank / 2;
    p.local_rank = p.rank % 2;
    p.host = "node" + std::to_string(p.node_rank);
    p.pid = 100 + p.rank;
    p.beaten = state & 1;
    p.beaten_by_hand = state & 2;
    p.silent_s = (state >> 3) * 0.5;
    if (state & 4) {
      p.no_answer = "no answer within 2 s";
    } else if (auto a = read_answer(line.substr(1))) {
      p.answer = std::move(*a);
    } else {
      p.no_answer = "a malformed answer";
    }
    ranks.push_back(std::move(p));
  }
  if (ranks.empty()) return 0;

  const HangReport report = analyse_hang(ranks, timeout_s);
  (void)verdict_name(report.verdict);
  if (report.verdict == HangReport::Verdict::kHung) {
    COHORT_FUZZ_CHECK(!report.culprits.empty(), "hung without a culprit");
    COHORT_FUZZ_CHECK(!report.summary.empty(), "hung without a summary");
    for (const HangCulprit& c : report.culprits)
      COHORT_FUZZ_CHECK(c.rank >= 0 && c.rank < static_cast<int>(ranks.size()),
                        "culprit %d is no rank of the job", c.rank);
    COHORT_FUZZ_CHECK(std::isfinite(report.hung_for_s) && report.hung_for_s >= 0, "hung for %g s",
                      report.hung_for_s);
    // As HangWatch reports it: the culprit's failure, dated when the hang began.
    WorkerFailure f;
    f.global_rank = report.culprits.front().rank;
    f.timestamp = 1.7e9 - report.hung_for_s;
    f.reason = report.culprits.front().reason;
    f.message = f.reason;
    f.traceback = report.culprits.front().stack;
    const std::string text = format_failure_report("train.py", {f});
    COHORT_FUZZ_CHECK(text.find("train.py FAILED") != std::string::npos, "no title");
  }
  if (report.verdict == HangReport::Verdict::kWaiting) {
    COHORT_FUZZ_CHECK(report.recheck_s.has_value(), "waiting without a time to look again");
    COHORT_FUZZ_CHECK(std::isfinite(*report.recheck_s) && *report.recheck_s >= 0 &&
                          *report.recheck_s <= timeout_s,
                      "look again in %g s", *report.recheck_s);
  }
  return 0;
}
