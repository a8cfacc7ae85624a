// ServerCounters: what the store server counts while it runs, for its metrics endpoint
// (StoreServer::metrics_text). Handlers count into one object their server owns; nothing here is
// read on the request path.
//
// Thread safety: none; the server's loop thread only.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

#include "cohort/base/prometheus.h"
#include "cohort/rdzv/codec.h"

namespace cohort::rdzv {

inline constexpr size_t kOpCount = static_cast<size_t>(Op::kBarrier) + 1;

// Why a request closed its connection (ProtocolHandler::reject).
enum class RejectReason : uint8_t {
  kNoToken,         // no token handshake where one is required
  kWrongToken,      // a handshake with the wrong token
  kTooLarge,        // over --max-request-bytes
  kMalformed,       // undecodable, or a key, value or key count over its limit
  kBadRequest,      // decodable but not allowed (a wrong VALIDATE magic, a tagged read)
  kTooManyWaiters,  // over --max-waiters
  kNotACounter,     // ADD or BARRIER on a value that is not a decimal integer
  kMissingKey,      // a 1.13 GET or MULTI_GET of a missing key (PyTorch 1.13's server closes too)
  kMaxMemory,       // a write past --max-memory (TCPStore has no error reply: closing is the error)
};
inline constexpr size_t kRejectReasonCount = static_cast<size_t>(RejectReason::kMaxMemory) + 1;
std::string_view reject_reason_name(RejectReason r);

struct ServerCounters {
  ServerCounters();
  // A request of `op` answered `latency` after its bytes were read (a parked WAIT: once woken).
  void answered(Op op, std::chrono::steady_clock::duration latency) {
    latency_[static_cast<size_t>(op)].observe(std::chrono::duration<double>(latency).count());
  }
  void rejected(RejectReason r) { ++rejects_[static_cast<size_t>(r)]; }

  const prom::Histogram& latency(Op op) const { return latency_[static_cast<size_t>(op)]; }
  uint64_t rejects(RejectReason r) const { return rejects_[static_cast<size_t>(r)]; }

 private:
  std::vector<prom::Histogram> latency_;  // by Op
  std::array<uint64_t, kRejectReasonCount> rejects_{};
};

}  // namespace cohort::rdzv
