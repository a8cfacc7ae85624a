#include "wire.h"

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

Dialect parse_dialect(std::string_view name) {
  if (name == "legacy" || name == "1.13") return Dialect::kLegacy;
  if (name == "current" || name == "2.x") return Dialect::kCurrent;
  throw Error("unknown dialect '" + std::string(name) + "' (legacy or current)");
}

}  // namespace cohort::bench
