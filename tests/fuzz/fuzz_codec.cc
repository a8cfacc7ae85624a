// fuzz_codec: the store's request parser, both TCPStore dialects.
//
// The input is a raw client-to-server byte stream (as a socket would deliver it). It is decoded
// as a stream in each dialect, once with the default limits and once with tight ones, and every
// answer is checked against properties that hold for any input:
//   - kComplete consumes at least the opcode and at most what was given; the opcode maps to the
//     decoded op and back; the request has the fields its command has; every key and value is a
//     view inside the consumed bytes and within the limits; re-encoding gives exactly the
//     consumed bytes; cutting the last byte (or half) gives kNeedMore;
//   - kBad consumes nothing and says why;
//   - tightening the limits can only turn an answer into kBad (never into another request).
// Plus detect_dialect on the first bytes, and the same bytes as a reply (decode_reply). Seeds:
// tests/fuzz/corpus/codec/ (the PyTorch 1.13 captures of docs/PROTOCOL.md §1.6, 2.x handshakes and
// requests).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "cohort/rdzv/codec.h"
#include "fuzz_check.h"

namespace {

using namespace cohort::rdzv;

constexpr Limits kTight{/*max_key_bytes=*/16, /*max_value_bytes=*/32, /*max_keys_per_request=*/4};
constexpr size_t kMaxRequestsPerStream = 512;

// How many keys and values each op carries; -1 for "as many as the count says".
void expected_fields(Op op, int* keys, int* values) {
  switch (op) {
    case Op::kValidate:
    case Op::kPing:
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      *keys = 0, *values = 0;
      return;
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
    case Op::kAdd:
    case Op::kBarrier:
      *keys = 1, *values = 0;
      return;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      *keys = 1, *values = 1;
      return;
    case Op::kCompareSet:
      *keys = 1, *values = 2;
      return;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      *keys = -1, *values = 0;
      return;
    case Op::kMultiSet:
      *keys = -1, *values = -1;
      return;
  }
  COHORT_FUZZ_CHECK(false, "op %d missing from expected_fields", static_cast<int>(op));
}

bool inside(std::string_view v, std::span<const uint8_t> in, size_t n) {
  auto* begin = reinterpret_cast<const char*>(in.data());
  return v.empty() || (v.data() >= begin && v.data() + v.size() <= begin + n);
}

void check_complete(Dialect d, std::span<const uint8_t> in, const Limits& limits,
                    const Request& req, size_t consumed) {
  COHORT_FUZZ_CHECK(consumed >= 1 && consumed <= in.size(), "consumed %zu of %zu", consumed,
                    in.size());
  auto op = op_from_wire(d, in[0]);
  COHORT_FUZZ_CHECK(op && *op == req.op, "opcode %u decoded as %s", in[0],
                    std::string(op_name(req.op)).c_str());
  auto wire = wire_from_op(d, req.op);
  COHORT_FUZZ_CHECK(wire && *wire == in[0], "op %s has no opcode %u",
                    std::string(op_name(req.op)).c_str(), in[0]);

  int keys, values;
  expected_fields(req.op, &keys, &values);
  if (keys >= 0) COHORT_FUZZ_CHECK(req.keys.size() == size_t(keys), "%zu keys", req.keys.size());
  if (values >= 0) {
    COHORT_FUZZ_CHECK(req.values.size() == size_t(values), "%zu values", req.values.size());
  } else {
    COHORT_FUZZ_CHECK(req.values.size() == req.keys.size(), "%zu values for %zu keys",
                      req.values.size(), req.keys.size());
  }
  COHORT_FUZZ_CHECK(req.keys.size() <= limits.max_keys_per_request, "%zu keys", req.keys.size());
  for (auto k : req.keys) {
    COHORT_FUZZ_CHECK(inside(k, in, consumed), "key outside the request");
    COHORT_FUZZ_CHECK(k.size() <= limits.max_key_bytes, "key of %zu bytes", k.size());
  }
  for (auto v : req.values) {
    COHORT_FUZZ_CHECK(inside(v, in, consumed), "value outside the request");
    COHORT_FUZZ_CHECK(v.size() <= limits.max_value_bytes, "value of %zu bytes", v.size());
  }

  // The wire form is canonical: encoding what was decoded gives back the same bytes.
  std::string again;
  encode_request(d, req, &again);
  COHORT_FUZZ_CHECK(again.size() == consumed && std::memcmp(again.data(), in.data(), consumed) == 0,
                    "re-encoded %s is %zu bytes, decoded from %zu",
                    std::string(op_name(req.op)).c_str(), again.size(), consumed);

  // A strict prefix of a complete request is never complete and never bad.
  Request scratch;
  for (size_t cut : {consumed - 1, consumed / 2}) {
    if (cut >= consumed) continue;
    DecodeResult r = decode_request(d, in.first(cut), limits, &scratch);
    COHORT_FUZZ_CHECK(r.status == DecodeStatus::kNeedMore, "prefix of %zu/%zu bytes: status %d",
                      cut, consumed, static_cast<int>(r.status));
  }
}

void decode_stream(Dialect d, std::span<const uint8_t> data) {
  Request req, tight_req;  // reused, as a connection does
  size_t pos = 0;
  for (size_t n = 0; n < kMaxRequestsPerStream && pos < data.size(); ++n) {
    std::span<const uint8_t> rest = data.subspan(pos);
    DecodeResult r = decode_request(d, rest, Limits{}, &req);
    DecodeResult t = decode_request(d, rest, kTight, &tight_req);

    if (t.status == DecodeStatus::kComplete) {
      // Passing the tight limits passes the default ones, with the same request.
      COHORT_FUZZ_CHECK(r.status == DecodeStatus::kComplete && r.consumed == t.consumed,
                        "complete under tight limits, status %d under default",
                        static_cast<int>(r.status));
      check_complete(d, rest, kTight, tight_req, t.consumed);
    }
    if (r.status == DecodeStatus::kBad) {
      COHORT_FUZZ_CHECK(t.status == DecodeStatus::kBad, "bad under default limits only");
    }
    if (r.status == DecodeStatus::kNeedMore) {
      COHORT_FUZZ_CHECK(t.status != DecodeStatus::kComplete, "tight complete, default not");
    }
    for (const DecodeResult* x : {&r, &t}) {
      if (x->status == DecodeStatus::kBad) {
        COHORT_FUZZ_CHECK(x->consumed == 0 && !x->error.empty(), "bad: consumed %zu, error '%s'",
                          x->consumed, x->error.c_str());
      }
      if (x->status == DecodeStatus::kNeedMore) {
        COHORT_FUZZ_CHECK(x->consumed == 0, "need more: consumed %zu", x->consumed);
      }
    }
    if (r.status != DecodeStatus::kComplete) return;
    check_complete(d, rest, Limits{}, req, r.consumed);
    pos += r.consumed;
  }
}

// The same bytes read as a server-to-client reply: the first byte picks the command and its key
// count (MULTI_GET), the rest is the reply. kComplete is canonical (re-encoding gives the consumed
// bytes) and its views lie inside them; kNeedMore asks for more than was given; kBad says why.
void decode_replies(std::span<const uint8_t> data) {
  if (data.empty()) return;
  const Op op = static_cast<Op>(data[0] % (static_cast<int>(Op::kBarrier) + 1));
  const size_t keys = data[0] >> 5;
  std::span<const uint8_t> in = data.subspan(1);
  Reply reply;
  for (uint64_t max : {uint64_t{64}, uint64_t{1} << 32}) {
    DecodeResult r = decode_reply(op, keys, in, &reply, max);
    if (r.status == DecodeStatus::kBad) {
      COHORT_FUZZ_CHECK(!r.error.empty(), "bad reply without a reason");
      continue;
    }
    if (r.status == DecodeStatus::kNeedMore) {
      COHORT_FUZZ_CHECK(r.consumed > in.size(), "need more: %zu of %zu", r.consumed, in.size());
      continue;
    }
    COHORT_FUZZ_CHECK(r.consumed <= in.size(), "reply consumed %zu of %zu", r.consumed, in.size());
    for (auto v : reply.values) {
      COHORT_FUZZ_CHECK(inside(v, in, r.consumed), "reply value outside the reply");
      COHORT_FUZZ_CHECK(v.size() <= max, "reply value of %zu bytes", v.size());
    }
    std::string again;
    encode_reply(reply, &again);
    COHORT_FUZZ_CHECK(
        again.size() == r.consumed && std::memcmp(again.data(), in.data(), r.consumed) == 0,
        "re-encoded %s reply is %zu bytes, decoded from %zu", std::string(op_name(op)).c_str(),
        again.size(), r.consumed);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  if (size > 0) {
    DetectStatus s = detect_dialect(in);
    if (size >= 5) COHORT_FUZZ_CHECK(s != DetectStatus::kNeedMore, "5 bytes and still undecided");
    // Only 00 ce f7 85 3c (VALIDATE) and cohortd's tagged-write prefix say "current".
    if (data[0] == kTaggedOpcode) {
      COHORT_FUZZ_CHECK(s == DetectStatus::kCurrent, "tagged first byte: %d", static_cast<int>(s));
    } else if (data[0] != 0) {
      COHORT_FUZZ_CHECK(s == DetectStatus::kLegacy, "first byte %u", data[0]);
    }
  }
  decode_stream(Dialect::kLegacy, in);
  decode_stream(Dialect::kCurrent, in);
  decode_replies(in);
  return 0;
}
