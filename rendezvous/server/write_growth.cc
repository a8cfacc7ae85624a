#include "server/write_growth.h"

#include <string>

namespace cohort::rdzv {
namespace {

// The longest decimal int64: "-9223372036854775808".
constexpr uint64_t kCounterBytes = 20;

// Bytes added by storing `bytes` of value under `key`.
uint64_t stored(const StoreState& state, std::string_view key, uint64_t bytes) {
  const std::string* old = state.get(key);
  if (old == nullptr) return key.size() + bytes;
  return bytes > old->size() ? bytes - old->size() : 0;
}

}  // namespace

uint64_t write_growth(const StoreState& state, const Request& req) {
  switch (req.op) {
    case Op::kSet:
      return stored(state, req.keys[0], req.values[0].size());
    case Op::kCompareSet: {
      const std::string* old = state.get(req.keys[0]);
      const bool writes = old == nullptr ? req.values[0].empty() : *old == req.values[0];
      return writes ? stored(state, req.keys[0], req.values[1].size()) : 0;
    }
    case Op::kAdd:
    case Op::kBarrier:
      return stored(state, req.keys[0], kCounterBytes);
    case Op::kAppend:
      return (state.get(req.keys[0]) == nullptr ? req.keys[0].size() : 0) + req.values[0].size();
    case Op::kMultiSet: {
      uint64_t n = 0;
      for (size_t i = 0; i < req.keys.size(); ++i)
        n += stored(state, req.keys[i], req.values[i].size());
      return n;
    }
    case Op::kQueuePush:
      return (state.queue_len(req.keys[0]) == 0 ? req.keys[0].size() : 0) + req.values[0].size();
    default:
      return 0;  // reads, waits, DELETE_KEY, QUEUE_POP, handshakes: nothing added
  }
}

}  // namespace cohort::rdzv
