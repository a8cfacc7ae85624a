// The few TCPStore requests the benchmark sends, pre-encoded with the real codec, and the sizes
// of their replies (docs/PROTOCOL.md §1.3). Pure functions; thread-safe.
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

// What the answer to a request looks like.
enum class ReplyKind : uint8_t {
  kU8,     // WAIT: STOP_WAITING
  kU32,    // PING: the nonce
  kI64,    // ADD: the new value
  kBytes,  // GET: u64 length, then the value
};

// Size of the complete reply at the start of `buf` (of `have` bytes), or 0 while incomplete.
size_t reply_size(ReplyKind kind, const char* buf, size_t have);

// Little-endian fixed fields of a reply. REQUIRES: enough bytes.
int64_t read_i64(const char* p);
uint32_t read_u32(const char* p);

// Accepts "legacy"/"1.13" or "current"/"2.x"; throws cohort::Error otherwise.
Dialect parse_dialect(std::string_view name);

}  // namespace cohort::bench
