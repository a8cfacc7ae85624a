#include "server/flood_log.h"

#include <spdlog/spdlog.h>

namespace cohort::rdzv {
namespace {

const char* why(FloodClose kind) {
  switch (kind) {
    case FloodClose::kTimeout:
      return "at a timeout";
    case FloodClose::kUnauthenticated:
      return "without a valid token";
    case FloodClose::kMaxMemory:
      return "for a write past --max-memory";
  }
  return "";
}

}  // namespace

void FloodLog::closed(FloodClose kind, const std::string& peer, const std::string& reason) {
  Kind& k = kinds_[static_cast<size_t>(kind)];
  ++k.unlogged;
  const auto now = std::chrono::steady_clock::now();
  if (now - k.last_line < std::chrono::seconds(1)) return;
  if (k.unlogged == 1) {
    log_.warn("closing connection from {}: {}", peer, reason);
  } else {
    log_.warn("closing connection from {}: {} (and {} more closed {} since the last such line)",
              peer, reason, k.unlogged - 1, why(kind));
  }
  k.unlogged = 0;
  k.last_line = now;
}

}  // namespace cohort::rdzv
