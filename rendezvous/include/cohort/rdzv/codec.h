// The TCPStore wire protocol: pure encoding and decoding of requests in both PyTorch dialects.
//
// A request is one opcode byte followed by fields; integers are little-endian; a byte string is a
// u64 length then the bytes; key lists are a u64 count then the strings. There is no framing, so
// decode_request() parses a stream prefix and answers complete / need more / bad, with the bytes
// it consumed. Size limits are checked on the length fields, before anything is allocated.
// See docs/PROTOCOL.md §1 for the captured bytes this codec is tested against.
//
// Nothing here touches a socket; every function is safe to call from any thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::rdzv {

// The two opcode numberings PyTorch has shipped.
enum class Dialect : uint8_t {
  kLegacy,   // PyTorch 1.13 / 2.0: SET=0 .. WATCH_KEY=7, DELETE_KEY=8; no handshake
  kCurrent,  // VALIDATE era (2.2+ .. 2.15): VALIDATE=0, SET=1 .. QUEUE_LEN=16, LIST_KEYS=17,
             // BARRIER=18
};

std::string_view dialect_name(Dialect d);

enum class Op : uint8_t {
  kValidate,
  kPing,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,  // reply: i64 count, then each key as a byte string
  kBarrier,   // key, i64 world size: ADD 1, then STOP_WAITING once the counter reaches it
};

std::string_view op_name(Op op);

// What follows a request's opcode byte.
enum class RequestShape : uint8_t {
  kNone,          // GETNUMKEYS, CANCEL_WAIT, LIST_KEYS
  kU32,           // VALIDATE magic, PING nonce
  kKey,           // GET, WATCH_KEY, DELETE_KEY, QUEUE_POP, QUEUE_LEN
  kKeyValue,      // SET, APPEND, QUEUE_PUSH
  kKeyTwoValues,  // COMPARE_SET: key, expected, desired
  kKeyDelta,      // ADD, BARRIER (the world size in place of the delta)
  kKeyList,       // CHECK, WAIT, MULTI_GET
  kPairList,      // MULTI_SET
};

// What the server answers (docs/PROTOCOL.md §1.3).
enum class ReplyShape : uint8_t {
  kNone,         // VALIDATE, SET, APPEND, MULTI_SET, QUEUE_PUSH
  kU8,           // CHECK, WAIT, BARRIER, CANCEL_WAIT, WATCH_KEY: one of the one-byte codes below
  kU32,          // PING: the nonce
  kI64,          // ADD (the sum), GETNUMKEYS, DELETE_KEY (1 or 0), QUEUE_LEN
  kBytes,        // GET, COMPARE_SET: one byte string
  kBytesPerKey,  // MULTI_GET: one byte string per key
  kCountedList,  // LIST_KEYS: i64 count, then that many byte strings
  kQueueItem,    // QUEUE_POP: i64 length; when positive, the popped value as a byte string
};

// What a command does, beyond its bytes.
enum CommandFlag : uint8_t {
  kMutates = 1 << 0,       // changes the store (logged when persistent)
  kMayBlock = 1 << 1,      // its reply may wait for other clients (WAIT, BARRIER)
  kTaggable = 1 << 2,      // may follow kTaggedOpcode: a write whose retry is answered from cache
  kLiveness = 1 << 3,      // touches no key (VALIDATE, PING): answered before authentication
  kWhileWaiting = 1 << 4,  // read and run while the connection's WAIT is parked (CANCEL_WAIT)
};

inline constexpr int kNoOpcode = -1;

// One row of the command table (codec.cc), one per Op.
struct CommandInfo {
  Op op;
  std::string_view name;
  int legacy_opcode;   // 1.13 / 2.0 numbering, kNoOpcode if the dialect has no such command
  int current_opcode;  // VALIDATE-era numbering, kNoOpcode if absent
  RequestShape request;
  ReplyShape reply;
  uint8_t flags;  // CommandFlag bits
  bool has(CommandFlag f) const { return (flags & f) != 0; }
  bool in_dialect(Dialect d) const {
    return (d == Dialect::kLegacy ? legacy_opcode : current_opcode) != kNoOpcode;
  }
};

const CommandInfo& command_info(Op op);

// Opcode <-> Op for a dialect; nullopt where the dialect has no such command.
std::optional<Op> op_from_wire(Dialect d, uint8_t opcode);
std::optional<uint8_t> wire_from_op(Dialect d, Op op);

// Sent (little-endian) after VALIDATE; a connection starting 00 ce f7 85 3c speaks kCurrent.
inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

// One-byte replies.
inline constexpr uint8_t kCheckReady = 0, kCheckNotReady = 1;
inline constexpr uint8_t kStopWaiting = 0, kWaitCanceled = 1;
inline constexpr uint8_t kWatchUpdated = 0, kWatchCreated = 1, kWatchDeleted = 2,
                         kWatchRegistered = 3;

// cohortd's extension for safe retries, valid in either dialect: 40 <u64 client> <u64 request>
// then a write request (SET, COMPARE_SET, ADD, DELETE_KEY, APPEND, MULTI_SET). cohortd remembers
// each client's last reply; the same (client, request) again gets that reply without running the
// write twice (a client retrying after a lost connection or a restarted cohortd).
inline constexpr uint8_t kTaggedOpcode = 0x40;
inline constexpr size_t kTagBytes = 1 + 8 + 8;

enum class DetectStatus { kLegacy, kCurrent, kNeedMore };

// Tells a connection's dialect from its first bytes (REQUIRES: at least one byte).
DetectStatus detect_dialect(std::span<const uint8_t> first_bytes);

struct Limits {
  uint64_t max_key_bytes = 64 * 1024;
  uint64_t max_value_bytes = 64ull << 20;
  uint64_t max_keys_per_request = 128 * 1024;
};

// A decoded request. The string views point into the buffer given to decode_request() and are
// valid until that buffer changes. Reuse one Request per connection: decoding keeps capacity.
struct Request {
  Op op = Op::kSet;
  std::vector<std::string_view> keys;    // every key, in wire order
  std::vector<std::string_view> values;  // SET/APPEND/QUEUE_PUSH: 1; COMPARE_SET: expected,
                                         // desired; MULTI_SET: one per key
  int64_t delta = 0;                     // ADD
  uint32_t u32 = 0;                      // VALIDATE magic, PING nonce
  void clear() {
    keys.clear();
    values.clear();
    delta = 0;
    u32 = 0;
  }
};

enum class DecodeStatus { kComplete, kNeedMore, kBad };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::kNeedMore;
  size_t consumed = 0;  // bytes of the request when kComplete
  std::string error;    // kBad: what was wrong (names the limit when one was exceeded)
};

// Decodes the request at the start of `in`.
DecodeResult decode_request(Dialect d, std::span<const uint8_t> in, const Limits& limits,
                            Request* out);

// Appends the wire form of `req` to `out`. REQUIRES: the dialect has req.op.
void encode_request(Dialect d, const Request& req, std::string* out);

// A reply, to encode (server) or decoded (clients). Which fields it uses follows
// command_info(op).reply; the string views point into the caller's memory (encoding) or into the
// buffer given to decode_reply() (decoding). Reuse one Reply: clearing keeps capacity.
struct Reply {
  Op op = Op::kSet;
  uint8_t code = 0;    // kU8: kCheckReady, kStopWaiting, kWaitCanceled, kWatchRegistered, ...
  uint32_t u32 = 0;    // kU32: PING's nonce
  int64_t number = 0;  // kI64; kCountedList: the count; kQueueItem: the queue's length before it
  std::vector<std::string_view> values;  // kBytes: 1; kBytesPerKey: one per key; kCountedList:
                                         // `number` strings; kQueueItem: 1 when number > 0
  void clear(Op o) {
    op = o;
    code = 0;
    u32 = 0;
    number = 0;
    values.clear();
  }
};

// Appends the wire form of `reply` to `out` (nothing for a ReplyShape::kNone command).
void encode_reply(const Reply& reply, std::string* out);

// Decodes the reply to a request of `op` at the start of `in`. `keys` is the request's key count
// (MULTI_GET is answered with one byte string per key). A byte string (or LIST_KEYS count) over
// `max_bytes` is kBad: a broken stream, not a reply to allocate for. kNeedMore sets `consumed` to
// the least size the complete reply can have (more than in.size()), so a reader can wait for that
// much at once.
DecodeResult decode_reply(Op op, size_t keys, std::span<const uint8_t> in, Reply* out,
                          uint64_t max_bytes = 1ull << 32);

// ---- primitives, shared by the server's replies and the clients -----------------------------
inline void put_u8(std::string* out, uint8_t v) {
  out->push_back(static_cast<char>(v));
}
inline void put_u32(std::string* out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);  // x86-64 and aarch64 are little-endian, as PyTorch assumes
  out->append(b, 4);
}
inline void put_u64(std::string* out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out->append(b, 8);
}
inline void put_i64(std::string* out, int64_t v) {
  put_u64(out, static_cast<uint64_t>(v));
}
inline void put_bytes(std::string* out, std::string_view s) {
  put_u64(out, s.size());
  out->append(s);
}

// Reads fixed fields from a byte span; each getter returns false when the span is too short.
class WireReader {
 public:
  explicit WireReader(std::span<const uint8_t> in) : in_(in) {}
  bool u8(uint8_t* v) {
    if (left() < 1) return false;
    *v = in_[pos_++];
    return true;
  }
  bool u32(uint32_t* v) { return fixed(v, 4); }
  bool u64(uint64_t* v) { return fixed(v, 8); }
  bool i64(int64_t* v) { return fixed(v, 8); }
  // A length-prefixed string. Sets *too_long (and returns false) when its length exceeds `max`.
  bool bytes(std::string_view* v, uint64_t max, bool* too_long) {
    uint64_t n;
    size_t start = pos_;
    if (!u64(&n)) return false;
    if (n > max) {
      *too_long = true;
      pos_ = start;
      return false;
    }
    if (left() < n) {
      pos_ = start;
      return false;
    }
    *v = std::string_view(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return in_.size() - pos_; }

 private:
  template <typename T>
  bool fixed(T* v, size_t n) {
    if (left() < n) return false;
    std::memcpy(v, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace cohort::rdzv
