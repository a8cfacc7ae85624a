#include "server/server_counters.h"

namespace cohort::rdzv {
namespace {

// Seconds. A request the loop answers from memory takes microseconds; a WAIT, a LIST_KEYS of a
// large store or a GET behind a compaction's pause takes milliseconds to minutes.
constexpr double kLatencyBounds[] = {5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4,
                                     1e-3, 1e-2, 0.1,    1,    10,   60};

}  // namespace

std::string_view reject_reason_name(RejectReason r) {
  switch (r) {
    case RejectReason::kNoToken:
      return "no_token";
    case RejectReason::kWrongToken:
      return "wrong_token";
    case RejectReason::kTooLarge:
      return "too_large";
    case RejectReason::kMalformed:
      return "malformed";
    case RejectReason::kBadRequest:
      return "bad_request";
    case RejectReason::kTooManyWaiters:
      return "too_many_waiters";
    case RejectReason::kNotACounter:
      return "not_a_counter";
    case RejectReason::kMissingKey:
      return "missing_key";
    case RejectReason::kMaxMemory:
      return "max_memory";
  }
  return "unknown";
}

ServerCounters::ServerCounters() : latency_(kOpCount, prom::Histogram(kLatencyBounds)) {}

}  // namespace cohort::rdzv
