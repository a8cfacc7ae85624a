// fuzz_heartbeat: the bytes a worker writes on its heartbeat pipe (cohort/base/heartbeat_line.h),
// read by cohortrun in whatever pieces read() returns. A worker is the user's code: whatever it
// writes must never crash cohortrun, and what cohortrun concludes must not depend on how the pipe
// cut the bytes.
//
// The input: its first byte picks where the bytes are cut (0: not at all; n: every n bytes); the
// rest is what the worker wrote. Fed whole, cut that way and cut at every byte, the parser must
// end with the same last step report, hello, malformed-line count and beat-by-hand state, and see
// a beat in the same bytes. A report it accepts has no negative field and encodes back (what
// libcohort writes) to a line that parses to the same values.
// Seeds: tests/fuzz/corpus/heartbeat/ (make_seeds.py: beats, reports and hellos of the Python
// module and libcohort, and lines cut short or too long).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cohort/base/heartbeat_line.h"
#include "fuzz_check.h"

namespace {

using namespace cohort::heartbeat_pipe;

struct Reading {
  bool beat = false;
  HeartbeatParser parser;
};

// Feeds `bytes` in pieces of `piece` bytes (0: whole).
void feed(Reading* r, std::string_view bytes, size_t piece) {
  if (piece == 0) piece = bytes.size() + 1;
  for (size_t at = 0; at < bytes.size(); at += piece)
    r->beat = r->parser.feed(bytes.substr(at, piece)) || r->beat;
}

void check_same(const Reading& a, const Reading& b, const char* how) {
  COHORT_FUZZ_CHECK(a.beat == b.beat, "a beat seen or not depending on the cut (%s)", how);
  COHORT_FUZZ_CHECK(a.parser.malformed() == b.parser.malformed(), "malformed %llu vs %llu (%s)",
                    static_cast<unsigned long long>(a.parser.malformed()),
                    static_cast<unsigned long long>(b.parser.malformed()), how);
  COHORT_FUZZ_CHECK(a.parser.beaten_by_hand() == b.parser.beaten_by_hand(), "by hand (%s)", how);
  const auto& sa = a.parser.last_step();
  const auto& sb = b.parser.last_step();
  COHORT_FUZZ_CHECK(sa.has_value() == sb.has_value(), "a step report (%s)", how);
  if (sa) {
    COHORT_FUZZ_CHECK(sa->step == sb->step && sa->step_s == sb->step_s &&
                          sa->items_per_s == sb->items_per_s && sa->comm_s == sb->comm_s,
                      "a different step report (%s)", how);
  }
  const auto& ha = a.parser.hello();
  const auto& hb = b.parser.hello();
  COHORT_FUZZ_CHECK(ha.has_value() == hb.has_value(), "a hello (%s)", how);
  if (ha)
    COHORT_FUZZ_CHECK(ha->pid == hb->pid && ha->features == hb->features, "a hello (%s)", how);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);

  Reading whole, cut, bytewise;
  feed(&whole, bytes, 0);
  feed(&cut, bytes, piece);
  feed(&bytewise, bytes, 1);
  check_same(whole, cut, "cut in pieces");
  check_same(whole, bytewise, "cut at every byte");

  if (const auto& r = whole.parser.last_step()) {
    COHORT_FUZZ_CHECK(r->step >= 0 && r->step_s >= 0 && r->items_per_s >= 0 && r->comm_s >= 0,
                      "a negative field in an accepted report");
    const std::string line = encode_step_report(*r);
    if (!line.empty()) {  // "" when it would not fit a line
      HeartbeatParser back;
      COHORT_FUZZ_CHECK(back.feed(line), "its own report is no beat: %s", line.c_str());
      COHORT_FUZZ_CHECK(back.malformed() == 0, "its own report refused: %s", line.c_str());
      // %.6g rounds: the encoding of what parsed back is the same line.
      COHORT_FUZZ_CHECK(encode_step_report(*back.last_step()) == line, "changed: %s", line.c_str());
    }
  }
  if (const auto& h = whole.parser.hello()) {
    const std::string line = encode_hello(*h);
    if (!line.empty()) {
      HeartbeatParser back;
      COHORT_FUZZ_CHECK(!back.feed(line), "a hello is a beat");
      COHORT_FUZZ_CHECK(back.hello().has_value() && back.hello()->pid == h->pid &&
                            back.hello()->features == h->features,
                        "its own hello changed: %s", line.c_str());
    }
  }
  return 0;
}
