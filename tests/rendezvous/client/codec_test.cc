// The codec against the bytes PyTorch 1.13 put on the wire (docs/PROTOCOL.md §1.6), every
// truncated prefix (must ask for more), oversize lengths (must be rejected before allocation) and
// both opcode numberings.
#include "cohort/rdzv/codec.h"

#include <gtest/gtest.h>

#include <span>

#include "../hex.h"

namespace cohort::rdzv {
namespace {

using cohort::testing::as_span;
using cohort::testing::hex;
using cohort::testing::unhex;

DecodeResult decode(Dialect d, const std::string& bytes, Request* req, Limits limits = {}) {
  return decode_request(d, as_span(bytes), limits, req);
}

struct Capture {
  const char* name;
  const char* bytes;
  Op op;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  int64_t delta;
};

// Client-to-server requests captured from torch 1.13.1 through a logging proxy.
const Capture kLegacyCaptures[] = {
    {"add init", "03 0500000000000000 696e69742f 0100000000000000", Op::kAdd, {"init/"}, {}, 1},
    {"set", "00 | 0200000000000000 2f6b 0200000000000000 7631", Op::kSet, {"/k"}, {"v1"}, 0},
    {"wait one", "05 0100000000000000 0200000000000000 2f6b", Op::kWait, {"/k"}, {}, 0},
    {"get", "02 | 0200000000000000 2f6b", Op::kGet, {"/k"}, {}, 0},
    {"add 5", "03 | 0400000000000000 2f636e74 0500000000000000", Op::kAdd, {"/cnt"}, {}, 5},
    {"add -2", "03 0400000000000000 2f636e74 feffffffffffffff", Op::kAdd, {"/cnt"}, {}, -2},
    {"cas ok",
     "01 0200000000000000 2f6b 0200000000000000 7631 0200000000000000 7632",
     Op::kCompareSet,
     {"/k"},
     {"v1", "v2"},
     0},
    {"cas nokey2",
     "01 0700000000000000 2f6e6f6b657932 0000000000000000 0300000000000000 646573",
     Op::kCompareSet,
     {"/nokey2"},
     {"", "des"},
     0},
    {"wait two",
     "05 | 0200000000000000 0200000000000000 2f6b 0400000000000000 2f636e74",
     Op::kWait,
     {"/k", "/cnt"},
     {},
     0},
    {"numkeys", "06", Op::kGetNumKeys, {}, {}, 0},
    {"delete", "08 0200000000000000 2f6b", Op::kDeleteKey, {"/k"}, {}, 0},
    {"prefix set",
     "00 1400000000000000 2f2f776f726b65722f617474656d70745f302f78 0100000000000000 31",
     Op::kSet,
     {"//worker/attempt_0/x"},
     {"1"},
     0},
    {"watch", "07 0200000000000000 2f77", Op::kWatchKey, {"/w"}, {}, 0},
};

TEST(Codec, DecodesEveryCaptured113Request) {
  for (const auto& c : kLegacyCaptures) {
    SCOPED_TRACE(c.name);
    std::string bytes = unhex(c.bytes);
    Request req;
    DecodeResult r = decode(Dialect::kLegacy, bytes, &req);
    ASSERT_EQ(r.status, DecodeStatus::kComplete) << r.error;
    EXPECT_EQ(r.consumed, bytes.size());
    EXPECT_EQ(req.op, c.op);
    ASSERT_EQ(req.keys.size(), c.keys.size());
    for (size_t i = 0; i < c.keys.size(); ++i) EXPECT_EQ(req.keys[i], c.keys[i]);
    ASSERT_EQ(req.values.size(), c.values.size());
    for (size_t i = 0; i < c.values.size(); ++i) EXPECT_EQ(req.values[i], c.values[i]);
    EXPECT_EQ(req.delta, c.delta);
  }
}

TEST(Codec, EncodesEveryCaptured113RequestByteForByte) {
  for (const auto& c : kLegacyCaptures) {
    SCOPED_TRACE(c.name);
    Request req;
    req.op = c.op;
    for (const auto& k : c.keys) req.keys.push_back(k);
    for (const auto& v : c.values) req.values.push_back(v);
    req.delta = c.delta;
    std::string out;
    encode_request(Dialect::kLegacy, req, &out);
    EXPECT_EQ(hex(out), hex(unhex(c.bytes)));
  }
}

TEST(Codec, EveryTruncatedPrefixAsksForMore) {
  for (const auto& c : kLegacyCaptures) {
    std::string bytes = unhex(c.bytes);
    for (size_t n = 0; n < bytes.size(); ++n) {
      Request req;
      DecodeResult r = decode(Dialect::kLegacy, bytes.substr(0, n), &req);
      EXPECT_EQ(r.status, DecodeStatus::kNeedMore) << c.name << " cut at " << n;
    }
  }
}

TEST(Codec, PipelinedRequestsDecodeOneAtATime) {
  // Captured: two GETNUMKEYS in one segment.
  std::string bytes = unhex("06 06");
  Request req;
  DecodeResult r = decode(Dialect::kLegacy, bytes, &req);
  ASSERT_EQ(r.status, DecodeStatus::kComplete);
  EXPECT_EQ(r.consumed, 1u);
}

TEST(Codec, KeyOverLimitIsRejectedFromItsLengthAlone) {
  Limits limits;
  limits.max_key_bytes = 16;
  // A SET announcing a 17-byte key, with none of the key's bytes present yet.
  std::string bytes = unhex("00 1100000000000000");
  Request req;
  DecodeResult r = decode(Dialect::kLegacy, bytes, &req, limits);
  EXPECT_EQ(r.status, DecodeStatus::kBad);
  EXPECT_NE(r.error.find("--max-key-bytes"), std::string::npos) << r.error;
  // Exactly at the limit is fine.
  std::string ok = unhex("00 1000000000000000") + std::string(16, 'k') + unhex("0000000000000000");
  EXPECT_EQ(decode(Dialect::kLegacy, ok, &req, limits).status, DecodeStatus::kComplete);
}

TEST(Codec, ValueOverLimitIsRejected) {
  Limits limits;
  limits.max_value_bytes = 4;
  std::string bytes = unhex("00 0100000000000000 6b 0500000000000000");
  Request req;
  DecodeResult r = decode(Dialect::kLegacy, bytes, &req, limits);
  EXPECT_EQ(r.status, DecodeStatus::kBad);
  EXPECT_NE(r.error.find("--max-value-bytes"), std::string::npos);
}

TEST(Codec, HugeLengthsAreRejectedNotAllocated) {
  // A gigantic announced length must fail at once, never wait for (or allocate) its bytes.
  std::string bytes = unhex("02 ffffffffffffff7f");
  Request req;
  EXPECT_EQ(decode(Dialect::kLegacy, bytes, &req).status, DecodeStatus::kBad);
  std::string wait = unhex("05 ffffffffffffffff");
  EXPECT_EQ(decode(Dialect::kLegacy, wait, &req).status, DecodeStatus::kBad);
}

TEST(Codec, KeyCountOverLimitIsRejected) {
  Limits limits;
  limits.max_keys_per_request = 2;
  std::string bytes = unhex("05 0300000000000000");
  Request req;
  DecodeResult r = decode(Dialect::kLegacy, bytes, &req, limits);
  EXPECT_EQ(r.status, DecodeStatus::kBad);
  EXPECT_NE(r.error.find("--max-keys-per-request"), std::string::npos);
}

TEST(Codec, UnknownOpcodesAreBadPerDialect) {
  Request req;
  // APPEND's 1.13-era number: PyTorch 1.13 resets the connection.
  auto r = decode(Dialect::kLegacy, unhex("09"), &req);
  EXPECT_EQ(r.status, DecodeStatus::kBad);
  EXPECT_NE(r.error.find("unknown command 9"), std::string::npos);
  EXPECT_EQ(decode(Dialect::kCurrent, unhex("13"), &req).status, DecodeStatus::kBad);
  EXPECT_EQ(decode(Dialect::kLegacy, unhex("11"), &req).status, DecodeStatus::kBad);
  EXPECT_EQ(decode(Dialect::kCurrent, unhex("ff"), &req).status, DecodeStatus::kBad);
}

TEST(Codec, BothNumberingsMapTheSameCommands) {
  EXPECT_EQ(op_from_wire(Dialect::kLegacy, 0), Op::kSet);
  EXPECT_EQ(op_from_wire(Dialect::kCurrent, 1), Op::kSet);
  EXPECT_EQ(op_from_wire(Dialect::kLegacy, 7), Op::kWatchKey);
  EXPECT_EQ(op_from_wire(Dialect::kCurrent, 7), Op::kGetNumKeys);
  EXPECT_EQ(op_from_wire(Dialect::kLegacy, 8), Op::kDeleteKey);
  EXPECT_EQ(op_from_wire(Dialect::kCurrent, 8), Op::kDeleteKey);
  EXPECT_EQ(op_from_wire(Dialect::kCurrent, 0), Op::kValidate);
  EXPECT_EQ(op_from_wire(Dialect::kCurrent, 12), Op::kCancelWait);
  EXPECT_EQ(op_from_wire(Dialect::kCurrent, 13), Op::kPing);
  EXPECT_EQ(op_from_wire(Dialect::kCurrent, 16), Op::kQueueLen);
  EXPECT_EQ(op_from_wire(Dialect::kCurrent, 17), Op::kListKeys);
  EXPECT_EQ(op_from_wire(Dialect::kCurrent, 18), Op::kBarrier);
  EXPECT_FALSE(op_from_wire(Dialect::kLegacy, 13));
  EXPECT_FALSE(wire_from_op(Dialect::kLegacy, Op::kMultiGet));
  EXPECT_FALSE(wire_from_op(Dialect::kCurrent, Op::kWatchKey));
}

TEST(Codec, CommandTableFlags) {
  // What the server relies on: exactly these writes may be tagged (their retries answered from
  // the cache), only VALIDATE and PING are answered before authentication, only CANCEL_WAIT runs
  // behind a parked WAIT.
  std::vector<Op> taggable, liveness, while_waiting, blocking;
  for (int i = 0; i <= static_cast<int>(Op::kBarrier); ++i) {
    const CommandInfo& c = command_info(static_cast<Op>(i));
    EXPECT_EQ(c.op, static_cast<Op>(i));
    EXPECT_EQ(c.name, op_name(c.op));
    if (c.has(kTaggable)) {
      taggable.push_back(c.op);
      EXPECT_TRUE(c.has(kMutates)) << c.name;
    }
    if (c.has(kLiveness)) liveness.push_back(c.op);
    if (c.has(kWhileWaiting)) while_waiting.push_back(c.op);
    if (c.has(kMayBlock)) blocking.push_back(c.op);
  }
  EXPECT_EQ(taggable, (std::vector<Op>{Op::kSet, Op::kCompareSet, Op::kAdd, Op::kDeleteKey,
                                       Op::kAppend, Op::kMultiSet}));
  EXPECT_EQ(liveness, (std::vector<Op>{Op::kValidate, Op::kPing}));
  EXPECT_EQ(while_waiting, (std::vector<Op>{Op::kCancelWait}));
  EXPECT_EQ(blocking, (std::vector<Op>{Op::kWait, Op::kBarrier}));
  EXPECT_TRUE(command_info(Op::kWatchKey).in_dialect(Dialect::kLegacy));
  EXPECT_FALSE(command_info(Op::kWatchKey).in_dialect(Dialect::kCurrent));
  EXPECT_FALSE(command_info(Op::kMultiGet).in_dialect(Dialect::kLegacy));
  EXPECT_EQ(command_info(Op::kGet).reply, ReplyShape::kBytes);
  EXPECT_EQ(command_info(Op::kSet).reply, ReplyShape::kNone);
}

TEST(Codec, RepliesRoundTripForEveryCommand) {
  for (int i = 0; i <= static_cast<int>(Op::kBarrier); ++i) {
    const Op op = static_cast<Op>(i);
    Reply reply;
    reply.clear(op);
    reply.code = kWatchRegistered;
    reply.u32 = 0xdeadbeef;
    reply.number = 2;
    reply.values = {"/a", "yz"};
    switch (command_info(op).reply) {
      case ReplyShape::kBytes:
      case ReplyShape::kQueueItem:
        reply.values.resize(1);
        break;
      case ReplyShape::kNone:
      case ReplyShape::kU8:
      case ReplyShape::kU32:
      case ReplyShape::kI64:
        reply.values.clear();
        break;
      default:
        break;
    }
    std::string bytes;
    encode_reply(reply, &bytes);
    Reply back;
    auto r = decode_reply(op, 2, as_span(bytes), &back);
    ASSERT_EQ(r.status, DecodeStatus::kComplete) << op_name(op);
    EXPECT_EQ(r.consumed, bytes.size()) << op_name(op);
    EXPECT_EQ(back.values, reply.values) << op_name(op);
    for (size_t n = 0; n < bytes.size(); ++n) {
      r = decode_reply(op, 2, as_span(bytes.substr(0, n)), &back);
      EXPECT_EQ(r.status, DecodeStatus::kNeedMore) << op_name(op) << " cut at " << n;
      EXPECT_GT(r.consumed, n) << op_name(op) << " cut at " << n;
      EXPECT_LE(r.consumed, bytes.size()) << op_name(op) << " cut at " << n;
    }
  }
  // The bytes PyTorch's clients expect (docs/PROTOCOL.md §1.3).
  Reply get;
  get.clear(Op::kGet);
  get.values = {"hi"};
  std::string bytes;
  encode_reply(get, &bytes);
  EXPECT_EQ(hex(bytes),
            "0200000000000000"
            "6869");
  Reply add;
  add.clear(Op::kAdd);
  add.number = -1;
  bytes.clear();
  encode_reply(add, &bytes);
  EXPECT_EQ(hex(bytes), "ffffffffffffffff");
}

TEST(Codec, ReplyLengthsOverTheBoundAreBad) {
  Reply back;
  EXPECT_EQ(decode_reply(Op::kGet, 1, as_span(unhex("0500000000000000 6869")), &back, 4).status,
            DecodeStatus::kBad);
  auto r = decode_reply(Op::kGet, 1, as_span(unhex("0400000000000000 6869")), &back, 4);
  EXPECT_EQ(r.status, DecodeStatus::kNeedMore);
  EXPECT_EQ(r.consumed, 12u);  // the whole reply, asked for at once
  EXPECT_EQ(decode_reply(Op::kListKeys, 0, as_span(unhex("ffffffffffffffff")), &back).status,
            DecodeStatus::kBad);
}

TEST(Codec, CurrentDialectRoundTripsEveryCommand) {
  for (int opcode = 0; opcode <= 18; ++opcode) {
    auto op = op_from_wire(Dialect::kCurrent, static_cast<uint8_t>(opcode));
    ASSERT_TRUE(op);
    Request req;
    req.op = *op;
    req.keys = {"/a", "/bb"};
    req.values = {"x", "yz"};
    req.delta = -7;
    req.u32 = 0xdeadbeef;
    std::string bytes;
    encode_request(Dialect::kCurrent, req, &bytes);
    Request back;
    auto r = decode(Dialect::kCurrent, bytes, &back);
    ASSERT_EQ(r.status, DecodeStatus::kComplete) << op_name(*op);
    EXPECT_EQ(r.consumed, bytes.size());
    EXPECT_EQ(back.op, *op);
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_EQ(decode(Dialect::kCurrent, bytes.substr(0, n), &back).status,
                DecodeStatus::kNeedMore)
          << op_name(*op) << " cut at " << n;
    }
  }
}

TEST(Codec, NewerClientHandshakeBytes) {
  // What a 2.x client sends first: VALIDATE(0x3C85F7CE) then PING(pid).
  std::string bytes = unhex("00 cef7853c 0d 39300000");
  EXPECT_EQ(detect_dialect(as_span(bytes)), DetectStatus::kCurrent);
  Request req;
  auto r = decode(Dialect::kCurrent, bytes, &req);
  ASSERT_EQ(r.status, DecodeStatus::kComplete);
  EXPECT_EQ(req.op, Op::kValidate);
  EXPECT_EQ(req.u32, kValidationMagic);
  EXPECT_EQ(r.consumed, 5u);
  r = decode(Dialect::kCurrent, bytes.substr(5), &req);
  ASSERT_EQ(r.status, DecodeStatus::kComplete);
  EXPECT_EQ(req.op, Op::kPing);
  EXPECT_EQ(req.u32, 12345u);
}

TEST(Codec, PyTorch215ListKeysAndBarrierBytes) {
  // Captured from PyTorch 2.15's client: list_keys(), then barrier("/b2", 2).
  Request req;
  auto r = decode(Dialect::kCurrent, unhex("11"), &req);
  ASSERT_EQ(r.status, DecodeStatus::kComplete);
  EXPECT_EQ(req.op, Op::kListKeys);
  const std::string barrier = unhex("12 0300000000000000 2f6232 0200000000000000");
  r = decode(Dialect::kCurrent, barrier, &req);  // req's key points into `barrier`
  ASSERT_EQ(r.status, DecodeStatus::kComplete);
  EXPECT_EQ(req.op, Op::kBarrier);
  EXPECT_EQ(std::string(req.keys.at(0)), "/b2");
  EXPECT_EQ(req.delta, 2);
}

TEST(Codec, DialectDetection) {
  EXPECT_EQ(detect_dialect(as_span(unhex("03"))), DetectStatus::kLegacy);
  EXPECT_EQ(detect_dialect(as_span(unhex("00"))), DetectStatus::kNeedMore);
  EXPECT_EQ(detect_dialect(as_span(unhex("00 ce f7"))), DetectStatus::kNeedMore);
  // A 1.13 SET of "/k": the key length's low byte is 02, not ce.
  EXPECT_EQ(detect_dialect(as_span(unhex("00 02 00"))), DetectStatus::kLegacy);
  EXPECT_EQ(detect_dialect(as_span(unhex("00 ce f7 85 3c"))), DetectStatus::kCurrent);
  EXPECT_EQ(detect_dialect(as_span(unhex("00 ce f7 85 3d"))), DetectStatus::kLegacy);
}

}  // namespace
}  // namespace cohort::rdzv
