// The few TCPStore requests the benchmark sends, pre-encoded with the real codec (its replies are
// decoded with rdzv::decode_reply; docs/PROTOCOL.md §1.3). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cohort/rdzv/codec.h"

namespace cohort::bench {

using rdzv::Dialect;

// Wire bytes of one request. The key is sent as given (TCPStore's own "/" prefix included).
std::string encode_set(Dialect d, std::string_view key, std::string_view value);
std::string encode_get(Dialect d, std::string_view key);
std::string encode_add(Dialect d, std::string_view key, int64_t delta);
std::string encode_wait(Dialect d, std::string_view key);
// VALIDATE(magic) then PING(nonce): how a VALIDATE-era client opens a connection.
// REQUIRES: d == Dialect::kCurrent.
std::string encode_handshake(Dialect d, uint32_t nonce);

// Replies are read with the codec's rdzv::decode_reply, as the server writes them.

// Accepts "legacy"/"1.13" or "current"/"2.x"; throws cohort::Error otherwise.
Dialect parse_dialect(std::string_view name);

}  // namespace cohort::bench
