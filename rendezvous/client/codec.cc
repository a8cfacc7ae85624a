#include "cohort/rdzv/codec.h"

#include <array>

namespace cohort::rdzv {
namespace {

constexpr int kNo = kNoOpcode;
using Shape = RequestShape;
using RS = ReplyShape;
constexpr uint8_t kWrite = kMutates | kTaggable;

// The command table: one row per Op, in Op order.
using CommandRow = CommandInfo;

constexpr std::array<CommandRow, 20> kCommands = {{
    {Op::kValidate, "VALIDATE", kNo, 0, Shape::kU32, RS::kNone, kLiveness},
    {Op::kPing, "PING", kNo, 13, Shape::kU32, RS::kU32, kLiveness},
    {Op::kSet, "SET", 0, 1, Shape::kKeyValue, RS::kNone, kWrite},
    {Op::kCompareSet, "COMPARE_SET", 1, 2, Shape::kKeyTwoValues, RS::kBytes, kWrite},
    {Op::kGet, "GET", 2, 3, Shape::kKey, RS::kBytes, 0},
    {Op::kAdd, "ADD", 3, 4, Shape::kKeyDelta, RS::kI64, kWrite},
    {Op::kCheck, "CHECK", 4, 5, Shape::kKeyList, RS::kU8, 0},
    {Op::kWait, "WAIT", 5, 6, Shape::kKeyList, RS::kU8, kMayBlock},
    {Op::kGetNumKeys, "GETNUMKEYS", 6, 7, Shape::kNone, RS::kI64, 0},
    {Op::kWatchKey, "WATCH_KEY", 7, kNo, Shape::kKey, RS::kU8, 0},
    {Op::kDeleteKey, "DELETE_KEY", 8, 8, Shape::kKey, RS::kI64, kWrite},
    {Op::kAppend, "APPEND", kNo, 9, Shape::kKeyValue, RS::kNone, kWrite},
    {Op::kMultiGet, "MULTI_GET", kNo, 10, Shape::kKeyList, RS::kBytesPerKey, 0},
    {Op::kMultiSet, "MULTI_SET", kNo, 11, Shape::kPairList, RS::kNone, kWrite},
    {Op::kCancelWait, "CANCEL_WAIT", kNo, 12, Shape::kNone, RS::kU8, kWhileWaiting},
    {Op::kQueuePush, "QUEUE_PUSH", kNo, 14, Shape::kKeyValue, RS::kNone, kMutates},
    {Op::kQueuePop, "QUEUE_POP", kNo, 15, Shape::kKey, RS::kQueueItem, kMutates},
    {Op::kQueueLen, "QUEUE_LEN", kNo, 16, Shape::kKey, RS::kI64, 0},
    {Op::kListKeys, "LIST_KEYS", kNo, 17, Shape::kNone, RS::kCountedList, 0},
    {Op::kBarrier, "BARRIER", kNo, 18, Shape::kKeyDelta, RS::kU8, kMutates | kMayBlock},
}};

constexpr bool table_in_op_order() {
  for (size_t i = 0; i < kCommands.size(); ++i)
    if (static_cast<size_t>(kCommands[i].op) != i) return false;
  return true;
}
static_assert(table_in_op_order(), "kCommands rows must follow the Op enum");

const CommandRow& row(Op op) {
  return kCommands[static_cast<size_t>(op)];
}

int opcode_of(Dialect d, const CommandRow& r) {
  return d == Dialect::kLegacy ? r.legacy_opcode : r.current_opcode;
}

// opcode -> Op, per dialect
struct OpcodeIndex {
  std::array<int, 256> legacy;
  std::array<int, 256> current;
  OpcodeIndex() {
    legacy.fill(kNo);
    current.fill(kNo);
    for (const auto& r : kCommands) {
      if (r.legacy_opcode != kNo) legacy[r.legacy_opcode] = static_cast<int>(r.op);
      if (r.current_opcode != kNo) current[r.current_opcode] = static_cast<int>(r.op);
    }
  }
};
const OpcodeIndex kIndex;

DecodeResult need_more() {
  return {DecodeStatus::kNeedMore, 0, {}};
}
DecodeResult bad(std::string why) {
  return {DecodeStatus::kBad, 0, std::move(why)};
}

std::string over_limit(std::string_view what, uint64_t n, std::string_view flag, uint64_t max) {
  return std::string(what) + " of " + std::to_string(n) + " exceeds " + std::string(flag) + " (" +
         std::to_string(max) + ")";
}

// Reads a length-prefixed string; on failure fills *result (need more or bad) and returns false.
bool read_string(WireReader& r, uint64_t max, std::string_view what, std::string_view flag,
                 std::string_view* out, DecodeResult* result) {
  bool too_long = false;
  if (r.bytes(out, max, &too_long)) return true;
  if (too_long) {
    uint64_t n = 0;  // bytes() saw the length, so u64() succeeds
    WireReader peek = r;
    peek.u64(&n);
    *result = bad(over_limit(what, n, flag, max));
  } else {
    *result = need_more();
  }
  return false;
}

bool read_key(WireReader& r, const Limits& l, Request* req, DecodeResult* res) {
  std::string_view k;
  if (!read_string(r, l.max_key_bytes, "key", "--max-key-bytes", &k, res)) return false;
  req->keys.push_back(k);
  return true;
}

bool read_value(WireReader& r, const Limits& l, Request* req, DecodeResult* res) {
  std::string_view v;
  if (!read_string(r, l.max_value_bytes, "value", "--max-value-bytes", &v, res)) return false;
  req->values.push_back(v);
  return true;
}

bool read_count(WireReader& r, const Limits& l, uint64_t* n, DecodeResult* res) {
  if (!r.u64(n)) {
    *res = need_more();
    return false;
  }
  if (*n > l.max_keys_per_request) {
    *res = bad(over_limit("key count", *n, "--max-keys-per-request", l.max_keys_per_request));
    return false;
  }
  return true;
}

}  // namespace

std::string_view dialect_name(Dialect d) {
  return d == Dialect::kLegacy ? "legacy (PyTorch 1.13/2.0)" : "current (PyTorch 2.2+)";
}

std::string_view op_name(Op op) {
  return row(op).name;
}

const CommandInfo& command_info(Op op) {
  return row(op);
}

std::optional<Op> op_from_wire(Dialect d, uint8_t opcode) {
  int v = d == Dialect::kLegacy ? kIndex.legacy[opcode] : kIndex.current[opcode];
  if (v == kNo) return std::nullopt;
  return static_cast<Op>(v);
}

std::optional<uint8_t> wire_from_op(Dialect d, Op op) {
  int v = opcode_of(d, row(op));
  if (v == kNo) return std::nullopt;
  return static_cast<uint8_t>(v);
}

DetectStatus detect_dialect(std::span<const uint8_t> first) {
  // VALIDATE-era clients always open with 00 ce f7 85 3c. In the 1.13 numbering those bytes would
  // start a SET whose key is about a gigabyte long, which no real client sends.
  static constexpr uint8_t kPrefix[5] = {0x00, 0xce, 0xf7, 0x85, 0x3c};
  if (first[0] == kTaggedOpcode) return DetectStatus::kCurrent;  // only our clients tag
  size_t n = std::min<size_t>(first.size(), 5);
  for (size_t i = 0; i < n; ++i)
    if (first[i] != kPrefix[i]) return DetectStatus::kLegacy;
  return n == 5 ? DetectStatus::kCurrent : DetectStatus::kNeedMore;
}

DecodeResult decode_request(Dialect d, std::span<const uint8_t> in, const Limits& limits,
                            Request* req) {
  req->clear();
  WireReader r(in);
  uint8_t opcode;
  if (!r.u8(&opcode)) return need_more();
  std::optional<Op> op = op_from_wire(d, opcode);
  if (!op) {
    return bad("unknown command " + std::to_string(opcode) + " in the " +
               std::string(dialect_name(d)) + " dialect");
  }
  req->op = *op;
  DecodeResult res;
  switch (row(*op).request) {
    case Shape::kNone:
      break;
    case Shape::kU32:
      if (!r.u32(&req->u32)) return need_more();
      break;
    case Shape::kKey:
      if (!read_key(r, limits, req, &res)) return res;
      break;
    case Shape::kKeyValue:
      if (!read_key(r, limits, req, &res) || !read_value(r, limits, req, &res)) return res;
      break;
    case Shape::kKeyTwoValues:
      if (!read_key(r, limits, req, &res) || !read_value(r, limits, req, &res) ||
          !read_value(r, limits, req, &res))
        return res;
      break;
    case Shape::kKeyDelta:
      if (!read_key(r, limits, req, &res)) return res;
      if (!r.i64(&req->delta)) return need_more();
      break;
    case Shape::kKeyList: {
      uint64_t n;
      if (!read_count(r, limits, &n, &res)) return res;
      for (uint64_t i = 0; i < n; ++i)
        if (!read_key(r, limits, req, &res)) return res;
      break;
    }
    case Shape::kPairList: {
      uint64_t n;
      if (!read_count(r, limits, &n, &res)) return res;
      for (uint64_t i = 0; i < n; ++i)
        if (!read_key(r, limits, req, &res) || !read_value(r, limits, req, &res)) return res;
      break;
    }
  }
  return {DecodeStatus::kComplete, r.pos(), {}};
}

void encode_request(Dialect d, const Request& req, std::string* out) {
  const CommandRow& cmd = row(req.op);
  put_u8(out, static_cast<uint8_t>(opcode_of(d, cmd)));
  switch (cmd.request) {
    case Shape::kNone:
      break;
    case Shape::kU32:
      put_u32(out, req.u32);
      break;
    case Shape::kKey:
      put_bytes(out, req.keys.at(0));
      break;
    case Shape::kKeyValue:
      put_bytes(out, req.keys.at(0));
      put_bytes(out, req.values.at(0));
      break;
    case Shape::kKeyTwoValues:
      put_bytes(out, req.keys.at(0));
      put_bytes(out, req.values.at(0));
      put_bytes(out, req.values.at(1));
      break;
    case Shape::kKeyDelta:
      put_bytes(out, req.keys.at(0));
      put_i64(out, req.delta);
      break;
    case Shape::kKeyList:
      put_u64(out, req.keys.size());
      for (auto k : req.keys) put_bytes(out, k);
      break;
    case Shape::kPairList:
      put_u64(out, req.keys.size());
      for (size_t i = 0; i < req.keys.size(); ++i) {
        put_bytes(out, req.keys[i]);
        put_bytes(out, req.values.at(i));
      }
      break;
  }
}

void encode_reply(const Reply& reply, std::string* out) {
  switch (row(reply.op).reply) {
    case ReplyShape::kNone:
      break;
    case ReplyShape::kU8:
      put_u8(out, reply.code);
      break;
    case ReplyShape::kU32:
      put_u32(out, reply.u32);
      break;
    case ReplyShape::kI64:
      put_i64(out, reply.number);
      break;
    case ReplyShape::kBytes:
      put_bytes(out, reply.values.at(0));
      break;
    case ReplyShape::kBytesPerKey:
      for (std::string_view v : reply.values) put_bytes(out, v);
      break;
    case ReplyShape::kCountedList:
      put_i64(out, reply.number);
      for (std::string_view v : reply.values) put_bytes(out, v);
      break;
    case ReplyShape::kQueueItem:
      put_i64(out, reply.number);
      if (reply.number > 0) put_bytes(out, reply.values.at(0));
      break;
  }
}

namespace {

DecodeResult reply_needs(size_t n) {
  return {DecodeStatus::kNeedMore, n, {}};
}

// Reads `n` byte strings into out->values; on failure fills *res and returns false.
bool read_reply_strings(WireReader& r, uint64_t n, uint64_t max, Reply* out, DecodeResult* res) {
  for (uint64_t i = 0; i < n; ++i) {
    std::string_view v;
    bool too_long = false;
    if (r.bytes(&v, max, &too_long)) {
      out->values.push_back(v);
      continue;
    }
    uint64_t len = 0;
    WireReader peek = r;
    if (!peek.u64(&len)) {
      *res = reply_needs(r.pos() + 8);
    } else if (too_long) {
      *res = bad("reply announces " + std::to_string(len) + " bytes");
    } else {
      *res = reply_needs(r.pos() + 8 + static_cast<size_t>(len));
    }
    return false;
  }
  return true;
}

}  // namespace

DecodeResult decode_reply(Op op, size_t keys, std::span<const uint8_t> in, Reply* out,
                          uint64_t max_bytes) {
  out->clear(op);
  WireReader r(in);
  DecodeResult res;
  switch (row(op).reply) {
    case ReplyShape::kNone:
      break;
    case ReplyShape::kU8:
      if (!r.u8(&out->code)) return reply_needs(1);
      break;
    case ReplyShape::kU32:
      if (!r.u32(&out->u32)) return reply_needs(4);
      break;
    case ReplyShape::kI64:
      if (!r.i64(&out->number)) return reply_needs(8);
      break;
    case ReplyShape::kBytes:
      if (!read_reply_strings(r, 1, max_bytes, out, &res)) return res;
      break;
    case ReplyShape::kBytesPerKey:
      if (!read_reply_strings(r, keys, max_bytes, out, &res)) return res;
      break;
    case ReplyShape::kCountedList:
      if (!r.i64(&out->number)) return reply_needs(8);
      if (out->number < 0 || static_cast<uint64_t>(out->number) > max_bytes)
        return bad("reply announces " + std::to_string(out->number) + " strings");
      if (!read_reply_strings(r, static_cast<uint64_t>(out->number), max_bytes, out, &res))
        return res;
      break;
    case ReplyShape::kQueueItem:
      if (!r.i64(&out->number)) return reply_needs(8);
      if (out->number > 0 && !read_reply_strings(r, 1, max_bytes, out, &res)) return res;
      break;
  }
  return {DecodeStatus::kComplete, r.pos(), {}};
}

}  // namespace cohort::rdzv
