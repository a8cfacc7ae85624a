#include "wire.h"

#include <cstring>

#include "cohort/error.h"

namespace cohort::bench {
namespace {

using rdzv::Op;
using rdzv::Request;

std::string encode(Dialect d, const Request& req) {
  std::string out;
  rdzv::encode_request(d, req, &out);
  return out;
}

}  // namespace

std::string encode_set(Dialect d, std::string_view key, std::string_view value) {
  Request r;
  r.op = Op::kSet;
  r.keys = {key};
  r.values = {value};
  return encode(d, r);
}

std::string encode_get(Dialect d, std::string_view key) {
  Request r;
  r.op = Op::kGet;
  r.keys = {key};
  return encode(d, r);
}

std::string encode_add(Dialect d, std::string_view key, int64_t delta) {
  Request r;
  r.op = Op::kAdd;
  r.keys = {key};
  r.delta = delta;
  return encode(d, r);
}

std::string encode_wait(Dialect d, std::string_view key) {
  Request r;
  r.op = Op::kWait;
  r.keys = {key};
  return encode(d, r);
}

std::string encode_handshake(Dialect d, uint32_t nonce) {
  Request validate;
  validate.op = Op::kValidate;
  validate.u32 = rdzv::kValidationMagic;
  Request ping;
  ping.op = Op::kPing;
  ping.u32 = nonce;
  return encode(d, validate) + encode(d, ping);
}

size_t reply_size(ReplyKind kind, const char* buf, size_t have) {
  switch (kind) {
    case ReplyKind::kU8:
      return have >= 1 ? 1 : 0;
    case ReplyKind::kU32:
      return have >= 4 ? 4 : 0;
    case ReplyKind::kI64:
      return have >= 8 ? 8 : 0;
    case ReplyKind::kBytes: {
      if (have < 8) return 0;
      uint64_t len;
      std::memcpy(&len, buf, 8);
      if (len > have - 8) return 0;
      return 8 + static_cast<size_t>(len);
    }
  }
  return 0;
}

int64_t read_i64(const char* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint32_t read_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

Dialect parse_dialect(std::string_view name) {
  if (name == "legacy" || name == "1.13") return Dialect::kLegacy;
  if (name == "current" || name == "2.x") return Dialect::kCurrent;
  throw Error("unknown dialect '" + std::string(name) + "' (legacy or current)");
}

}  // namespace cohort::bench
