// fuzz_server: the store server fed whole conversations, without sockets.
//
// Up to four client connections (ProtocolHandler, as Session drives it) share one StoreState. The
// input is a configuration byte, then records, each for one connection slot:
//   raw bytes       the client sends them (any split: a record may end mid-request);
//   a request       a few bytes pick a well-formed request (op, keys, values, delta) that is
//                   encoded in the connection's dialect, so deep states (parked waits woken by
//                   another connection, CANCEL_WAIT, watches, queues) are easy to reach; or the
//                   same as one of cohortd's tagged writes (a small client and request id, so
//                   retries happen);
//   authenticate    the token handshake done right (HELLO, then the HMAC of the challenge the
//                   server sent), which raw bytes cannot do;
//   close           the client goes away (also mid-request, or while its WAIT is parked): the
//                   connection is dropped with state.drop_session(), as Server does;
//   bytes one by one the client sends a record byte by byte (1.13's MSG_MORE segments);
//   repeated bytes  a chunk sent N times over (large requests, many pipelined requests, input
//                   buffered behind a parked WAIT) from a few input bytes.
// The server reads at most read_space() bytes at a time and processes after each read.
// A slot whose connection closed opens a new connection (new SessionId) on its next record. The
// configuration byte picks limits, --max-waiters, --max-request-bytes, and whether connections
// must authenticate and with which token.
// After each record the posted process() calls run (Session runs them on a later loop turn).
//
// Checked, besides ASan/UBSan/LSan:
//   - against StoreModel (store_model.h, a naive model written from the protocol notes), after
//     every process(): each request the handler consumed gets exactly the model's reply bytes;
//     the handler closes the connection exactly when the model says so (or when the unconsumed
//     input is malformed or over --max-request-bytes, and then it says why); it parks exactly
//     when the model parks; the sessions whose waits it completes are told, in the model's order;
//     a tagged write that repeats the client's last (client, request) gets the remembered reply
//     and changes nothing; the token handshake accepts exactly the right proof;
//   - the journal (what --data-dir persists) replayed from the start gives the model's keys and
//     values, and its batches nest;
//   - the listener is told only about open sessions, and a satisfied wait only for a handler
//     that is waiting();
//   - StoreState::parked_waits() equals the number of handlers with waiting() == true;
//   - every connection's output is whole replies in request order, with watch notifications
//     exactly where they were delivered; nothing is owed but a parked WAIT;
// and at the end, with every connection closed, no wait is parked and writing any key tells
// nobody. Seeds: tests/fuzz/corpus/server/ (made by tests/fuzz/make_seeds.py).
// COHORT_FUZZ_TRACE=1 in the environment prints each record and the replies it drew, which is how
// to read a reproducer: build-fuzz/bin/fuzz_server <file>.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/rdzv/auth.h"
#include "cohort/rdzv/codec.h"
#include "cohort/rdzv/server.h"
#include "fuzz_check.h"
#include "server/protocol_handler.h"
#include "server/store_state.h"
#include "store_model.h"

namespace {

using namespace cohort::rdzv;
using cohort::rdzv::fuzz::StoreModel;
namespace auth = cohort::auth;

constexpr size_t kSlots = 4;
constexpr size_t kMaxRecords = 4096;

// Record kinds: the header byte is slot + kSlots * kind, kind in [0, 64).
constexpr uint8_t kRawBelow = 36, kPlainRequestBelow = 50, kRequestBelow = 54, kCloseBelow = 56,
                  kAuthBelow = 58, kBytewiseBelow = 62;
// then repeated bytes; at most this many in one record:
// (enough to grow the input buffer past the 64 KiB it keeps when idle)
constexpr size_t kMaxRepeated = 160 * 1024;

// Keys and values a synthesized request picks from: a few shared names so connections meet.
constexpr std::array<std::string_view, 4> kKeys = {"/k", "init/", "q", "/a_key_of_17_bytes"};
constexpr std::string_view kToken = "fuzz-token";
// codec.h: tagged writes are "valid in either dialect". Set this if cohortd comes to refuse them
// on 1.13-dialect connections (as TcpStore already refuses to send them there).
constexpr bool kTaggedNeedsCurrentDialect = false;
constexpr std::array<std::string_view, 8> kValues = {"",
                                                     "1",
                                                     "v1",
                                                     " 12",
                                                     "-5",
                                                     "x",
                                                     "9223372036854775807",
                                                     "a value of forty bytes................."};

// A reply owed: exact bytes, or the STOP_WAITING of a parked WAIT (which becomes "00" when the
// model wakes the session, or disappears when the session cancels it).
struct Expect {
  std::string bytes;
  bool parked = false;
};

struct Notification {
  uint64_t offset;  // in the connection's reply stream
  std::string bytes;
};

struct Conn {
  std::unique_ptr<ProtocolHandler> h;
  SessionId id = 0;
  std::string sent;     // everything the client sent
  size_t modelled = 0;  // bytes of `sent` whose replies are accounted for in `expect`
  enum class Auth { kNone, kChallenged, kDone } auth = Auth::kNone;  // as the model sees it
  std::string challenge;
  std::string nonce;  // the mutual handshake's (AUTH_HELLO_MUTUAL); empty in the one-way one
  bool liveness_only = false;  // unauthenticated PyTorch 2.x: VALIDATE and PING, nothing else
  bool dialect_known = false;
  Dialect dialect = Dialect::kLegacy;
  std::deque<Expect> expect;       // replies owed, in request order
  std::string stream;              // replies taken from the handler, not yet matched
  uint64_t stream_base = 0;        // offset of stream[0] in everything the handler wrote
  std::deque<Notification> notes;  // unsolicited watch messages, by offset
  bool posted = false;             // process() queued for the next loop turn
};

const bool kTrace = std::getenv("COHORT_FUZZ_TRACE") != nullptr;

std::string hex(std::string_view bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes.substr(0, 64)) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  if (bytes.size() > 64) out += "...";
  return out;
}

// What --data-dir would persist, replayed as it arrives: must always equal the model's keys.
class ShadowJournal final : public StoreState::Journal {
 public:
  void on_change(std::string_view key, const std::string* value) override {
    if (value) {
      data_[std::string(key)] = *value;
    } else {
      data_.erase(std::string(key));
    }
  }
  void on_reply(uint64_t, uint64_t, const std::string&) override {
    COHORT_FUZZ_CHECK(depth_ >= 1, "a remembered reply outside a batch (depth %d)", depth_);
  }
  // A tagged MULTI_SET nests its own batch in the tagged write's: at most two deep.
  void begin_batch() override {
    ++depth_;
    COHORT_FUZZ_CHECK(depth_ <= 2, "batches nest %d deep", depth_);
  }
  void end_batch() override {
    --depth_;
    COHORT_FUZZ_CHECK(depth_ >= 0, "a batch ended twice");
  }
  const std::map<std::string, std::string>& data() const { return data_; }
  int depth() const { return depth_; }

 private:
  std::map<std::string, std::string> data_;
  int depth_ = 0;
};

class Harness final : public StoreListener {
 public:
  Harness(const StoreServerOptions& options, bool must_authenticate)
      : options_(options),
        must_authenticate_(must_authenticate),
        state_(this, options.max_waiters),
        model_(options.max_waiters) {
    state_.set_journal(&journal_);
  }

  // ---- StoreListener ----
  void on_wait_satisfied(SessionId id) override {
    Conn* c = find(id);
    COHORT_FUZZ_CHECK(c != nullptr, "wait satisfied for session %llu, which is closed",
                      static_cast<unsigned long long>(id));
    COHORT_FUZZ_CHECK(c->h->waiting(), "wait satisfied for session %llu, which is not waiting",
                      static_cast<unsigned long long>(id));
    told_.push_back(id);
    if (c->h->wake()) c->posted = true;  // Session posts process() to a later turn
  }
  void on_watch_event(SessionId id, const WatchEvent& event) override {
    Conn* c = find(id);
    COHORT_FUZZ_CHECK(c != nullptr, "watch event for session %llu, which is closed",
                      static_cast<unsigned long long>(id));
    // Where the handler's output ends now; but a tagged write sets its notifications aside and
    // puts them in, in order, before its reply: each follows the one delivered before it.
    size_t at = c->stream_base + c->stream.size() + c->h->output().size();
    if (!c->notes.empty()) at = std::max(at, c->notes.back().offset + c->notes.back().bytes.size());
    std::string msg;
    encode_watch_notification(event, &msg);
    c->notes.push_back({at, std::move(msg)});
    c->h->deliver(event);
  }

  // ---- the clients ----
  void send(size_t slot, std::string_view bytes) {
    Conn& c = open(slot);
    if (kTrace)
      std::fprintf(stderr, "  conn %zu (session %llu) <- %s\n", slot,
                   static_cast<unsigned long long>(c.id), hex(bytes).c_str());
    // Session::on_read: one read of at most read_space() bytes, then process().
    while (!bytes.empty()) {
      std::span<uint8_t> space = c.h->read_space();
      COHORT_FUZZ_CHECK(!space.empty(), "read_space() is empty");
      size_t n = std::min(space.size(), bytes.size());
      std::memcpy(space.data(), bytes.data(), n);
      c.sent.append(bytes.substr(0, n));
      c.h->commit(n);
      bytes.remove_prefix(n);
      SessionId id = c.id;
      run(c);
      if (!c.h || c.id != id) return;  // closed: the rest of the bytes go nowhere
    }
  }

  // A well-formed request from a few selector bytes, in the connection's dialect (a fresh
  // connection picks one; a current-dialect one opens with VALIDATE, as 2.x clients do).
  // `tag` >= 0: as a tagged write from client tag >> 4, request tag & 15.
  void send_request(size_t slot, const uint8_t sel[4], int tag = -1) {
    Conn& c = open(slot);
    std::string bytes;
    Dialect d;
    if (c.sent.empty()) {
      d = (sel[0] & 0x80) ? Dialect::kCurrent : Dialect::kLegacy;
      if (d == Dialect::kCurrent) {
        Request v;
        v.op = Op::kValidate;
        v.u32 = kValidationMagic;
        encode_request(d, v, &bytes);
      }
    } else {
      std::span<const uint8_t> first(reinterpret_cast<const uint8_t*>(c.sent.data()),
                                     c.sent.size());
      d = detect_dialect(first) == DetectStatus::kCurrent ? Dialect::kCurrent : Dialect::kLegacy;
    }
    Request req;
    req.op = static_cast<Op>((sel[0] & 0x7f) % 20);
    if (!wire_from_op(d, req.op)) req.op = (sel[0] & 1) ? Op::kWait : Op::kGet;
    // Mostly a few keys; sel[3] adds up to 127 more (a key listed many times registers a wait
    // as many times: long per-key waiter lists).
    size_t count = 1 + (sel[1] & 3) + (sel[3] & 0x7f);
    auto key = [&](size_t i) { return kKeys[(sel[1] >> (2 + 2 * (i % 3))) & 3]; };
    auto value = [&](size_t i) { return kValues[(sel[2] >> (3 * (i % 2))) & 7]; };
    switch (req.op) {
      case Op::kValidate:
        req.u32 = sel[3] == 0xff ? 0xdeadbeef : kValidationMagic;
        break;
      case Op::kPing:
        req.u32 = sel[3] | (uint32_t{sel[2]} << 8);
        break;
      case Op::kCheck:
      case Op::kWait:
      case Op::kMultiGet:
        for (size_t i = 0; i < count; ++i) req.keys.push_back(key(i));
        break;
      case Op::kMultiSet:
        for (size_t i = 0; i < count; ++i) {
          req.keys.push_back(key(i));
          req.values.push_back(value(i));
        }
        break;
      case Op::kGetNumKeys:
      case Op::kCancelWait:
      case Op::kListKeys:
        break;
      case Op::kBarrier:
        req.keys.push_back(key(0));
        req.delta = 1 + (sel[3] & 3);  // world sizes 1..4: some arrivals park, some release
        break;
      default:
        req.keys.push_back(key(0));
        req.values.push_back(value(0));
        req.values.push_back(value(1));
        req.delta = static_cast<int8_t>(sel[3]);
        break;
    }
    if (tag >= 0) {
      put_u8(&bytes, kTaggedOpcode);
      put_u64(&bytes, static_cast<uint64_t>(tag >> 4));
      put_u64(&bytes, static_cast<uint64_t>(tag & 15));
    }
    encode_request(d, req, &bytes);
    send(slot, bytes);
  }

  // The token handshake as cohortd's clients do it: HELLO, then HMAC(token, challenge).
  void authenticate(size_t slot) {
    Conn& c = open(slot);
    std::string hello(1, static_cast<char>(auth::kHello));
    send(slot, hello);
    if (!c.h) return;  // not the first bytes of the connection: closed
    std::string all = c.stream + c.h->output().flatten();
    if (c.stream_base != 0 || all.size() < auth::kChallengeBytes) return;  // no challenge came
    std::string proof(1, static_cast<char>(auth::kProof));
    proof += auth::prove(kToken, all.substr(0, auth::kChallengeBytes));
    send(slot, proof);
  }

  // The client goes away, whatever it was in the middle of.
  void close(size_t slot) {
    Conn& c = conns_[slot];
    if (kTrace && c.h) std::fprintf(stderr, "  conn %zu closes\n", slot);
    if (c.h) drop(c);
  }

  // One turn of the loop: the process() calls that wake() asked for.
  void turn() {
    for (int rounds = 0; rounds < 64; ++rounds) {
      bool any = false;
      for (Conn& c : conns_) {
        if (c.h && c.posted) {
          c.posted = false;
          any = true;
          run(c);
        }
      }
      if (!any) return;
    }
  }

  void check() {
    size_t waiting = 0;
    for (Conn& c : conns_) {
      if (!c.h) continue;
      match(c);
      if (c.h->waiting()) ++waiting;
    }
    COHORT_FUZZ_CHECK(state_.parked_waits() == waiting && model_.parked_count() == waiting,
                      "%zu parked waits, %zu handlers waiting, %zu in the model",
                      state_.parked_waits(), waiting, model_.parked_count());
    COHORT_FUZZ_CHECK(journal_.depth() == 0, "a batch left open");
    COHORT_FUZZ_CHECK(journal_.data() == model_.data(),
                      "the journal holds %zu keys, the model %zu (a change not journaled)",
                      journal_.data().size(), model_.data().size());
  }

  // Every connection closes; nothing may stay registered for them.
  void finish() {
    for (size_t i = 0; i < kSlots; ++i) close(i);
    COHORT_FUZZ_CHECK(state_.parked_waits() == 0, "%zu waits parked with no connection",
                      state_.parked_waits());
    for (auto k : kKeys) state_.set(k, "after");  // the listener aborts if anyone is told
    for (auto k : kKeys) state_.queue_push(k, "after");
  }

 private:
  Conn* find(SessionId id) {
    for (Conn& c : conns_)
      if (c.h && c.id == id) return &c;
    return nullptr;
  }

  Conn& open(size_t slot) {
    Conn& c = conns_[slot];
    if (!c.h) {
      c = Conn{};
      c.id = next_id_++;
      c.h =
          std::make_unique<ProtocolHandler>(state_, options_, c.id, must_authenticate_, &counters_);
    }
    return c;
  }

  void drop(Conn& c) {
    state_.drop_session(c.id);  // Server::on_session_closed
    model_.drop(c.id);
    c.h.reset();
    c = Conn{};
  }

  // Session::process(): the handler runs what it can; the model then runs the same requests and
  // both must agree on replies, parking, closing and whom to wake.
  void run(Conn& c) {
    told_.clear();
    bool open = c.h->process();
    // A turn that yielded (ProtocolHandler::kTurnOutputBytes of replies) is resumed by the session
    // on a later turn; here, at once.
    while (open && c.h->yielded()) open = c.h->process();
    size_t consumed = c.sent.size() - c.h->buffered_input();
    COHORT_FUZZ_CHECK(consumed >= c.modelled, "consumed went back from %zu to %zu", c.modelled,
                      consumed);
    std::vector<SessionId> woken;
    bool model_closes = false;
    model_handshake(c, consumed, &model_closes);
    if (!model_closes && c.auth == Conn::Auth::kDone && consumed > c.modelled && !c.dialect_known) {
      DetectStatus s = detect_dialect(as_bytes(c.sent).subspan(c.modelled));
      COHORT_FUZZ_CHECK(s != DetectStatus::kNeedMore, "consumed before the dialect is known");
      c.dialect = s == DetectStatus::kCurrent ? Dialect::kCurrent : Dialect::kLegacy;
      c.dialect_known = true;
    }
    Request req;
    while (c.modelled < consumed) {
      COHORT_FUZZ_CHECK(!model_closes, "session %llu: requests ran after one that must close",
                        static_cast<unsigned long long>(c.id));
      auto rest = as_bytes(c.sent).subspan(c.modelled, consumed - c.modelled);
      // cohortd's tagged writes: 40 <u64 client> <u64 request> <a write request>.
      bool tagged = rest[0] == kTaggedOpcode;
      uint64_t tag_client = 0, tag_request = 0;
      if (tagged) {
        COHORT_FUZZ_CHECK(rest.size() > kTagBytes, "consumed half a tag");
        std::memcpy(&tag_client, rest.data() + 1, 8);
        std::memcpy(&tag_request, rest.data() + 9, 8);
        rest = rest.subspan(kTagBytes);
        c.modelled += kTagBytes;
      }
      DecodeResult r = decode_request(c.dialect, rest, options_.limits, &req);
      COHORT_FUZZ_CHECK(r.status == DecodeStatus::kComplete,
                        "the handler consumed %zu bytes that are not whole requests (status %d)",
                        rest.size(), static_cast<int>(r.status));
      c.modelled += r.consumed;
      const bool dropped_dead_wait = model_.drop_dead_wait(c.id, c.dialect);
      StoreModel::Outcome o;
      const std::string* cached = tagged ? model_.cached(tag_client, tag_request) : nullptr;
      if (tagged &&
          (!is_write(req.op) || (kTaggedNeedsCurrentDialect && c.dialect != Dialect::kCurrent))) {
        o.closes = true;
      } else if (cached) {
        o.reply = *cached;  // a retry: the write already happened
      } else {
        o = model_.apply(c.id, c.dialect, req);
        if (tagged && !o.closes) model_.remember(tag_client, tag_request, o.reply);
      }
      if (dropped_dead_wait) o.cancelled_parked = true;
      if (kTrace) {
        std::fprintf(stderr, "  session %llu runs %s%s: model %s%s%s\n",
                     static_cast<unsigned long long>(c.id), tagged ? "tagged " : "",
                     std::string(op_name(req.op)).c_str(),
                     o.closes  ? "closes"
                     : o.parks ? "parks"
                               : hex(o.reply).c_str(),
                     o.woken.empty() ? "" : ", wakes ",
                     o.woken.empty() ? "" : std::to_string(o.woken.size()).c_str());
      }
      if (o.closes) {
        model_closes = true;
        continue;
      }
      for (SessionId s : o.woken) {
        Conn* w = find(s);
        COHORT_FUZZ_CHECK(w && !w->expect.empty() && w->expect.back().parked,
                          "the model wakes session %llu, which has no parked WAIT",
                          static_cast<unsigned long long>(s));
        w->expect.back() = Expect{std::string(1, static_cast<char>(kStopWaiting))};
        woken.push_back(s);
      }
      if (o.cancelled_parked) {
        COHORT_FUZZ_CHECK(!c.expect.empty() && c.expect.back().parked, "cancelled nothing");
        c.expect.pop_back();
      }
      if (o.parks) {
        c.expect.push_back(Expect{{}, true});
      } else if (!o.reply.empty()) {
        c.expect.push_back(Expect{o.reply});
      }
    }
    COHORT_FUZZ_CHECK(woken == told_, "session %llu: the model wakes %zu sessions, the store %zu",
                      static_cast<unsigned long long>(c.id), woken.size(), told_.size());
    if (open) {
      COHORT_FUZZ_CHECK(!model_closes, "session %llu: kept open after a request that must close",
                        static_cast<unsigned long long>(c.id));
      COHORT_FUZZ_CHECK(c.h->waiting() == model_.parked(c.id),
                        "session %llu: waiting() %d, model %d",
                        static_cast<unsigned long long>(c.id), c.h->waiting(), model_.parked(c.id));
      return;
    }
    COHORT_FUZZ_CHECK(!c.h->close_reason().empty(), "closed without a reason");
    if (kTrace)
      std::fprintf(stderr, "  server closes session %llu: %s\n",
                   static_cast<unsigned long long>(c.id), c.h->close_reason().c_str());
    if (c.auth != Conn::Auth::kDone) {
      COHORT_FUZZ_CHECK(model_closes && c.h->refused_unauthenticated(),
                        "session %llu closed during the handshake (%s), model %d",
                        static_cast<unsigned long long>(c.id), c.h->close_reason().c_str(),
                        model_closes);
    } else if (!model_closes) {
      // Then what is left must be malformed, or a partial request over --max-request-bytes.
      // (A tagged request that is not a write is refused before it counts as consumed.)
      auto rest = as_bytes(c.sent).subspan(consumed);
      Dialect d = c.dialect;
      if (!c.dialect_known && !rest.empty()) {
        d = detect_dialect(rest) == DetectStatus::kCurrent ? Dialect::kCurrent : Dialect::kLegacy;
      }
      bool tagged = !rest.empty() && rest[0] == kTaggedOpcode && rest.size() > kTagBytes;
      if (tagged) rest = rest.subspan(kTagBytes);
      DecodeResult r = decode_request(d, rest, options_.limits, &req);
      bool too_big =
          r.status == DecodeStatus::kNeedMore && rest.size() > options_.max_request_bytes;
      bool tagged_read =
          tagged && r.status == DecodeStatus::kComplete &&
          (!is_write(req.op) || (kTaggedNeedsCurrentDialect && d != Dialect::kCurrent));
      bool refused_probe = c.liveness_only && r.status == DecodeStatus::kComplete &&
                           req.op != Op::kValidate && req.op != Op::kPing;
      COHORT_FUZZ_CHECK(!refused_probe || c.h->refused_unauthenticated(),
                        "session %llu: an unauthenticated request closed for another reason (%s)",
                        static_cast<unsigned long long>(c.id), c.h->close_reason().c_str());
      COHORT_FUZZ_CHECK(r.status == DecodeStatus::kBad || too_big || tagged_read || refused_probe,
                        "session %llu closed (%s) with %zu bytes left that decode as status %d",
                        static_cast<unsigned long long>(c.id), c.h->close_reason().c_str(),
                        rest.size(), static_cast<int>(r.status));
    }
    drop(c);
  }

  static bool is_write(Op op) {
    return op == Op::kSet || op == Op::kCompareSet || op == Op::kAdd || op == Op::kDeleteKey ||
           op == Op::kAppend || op == Op::kMultiSet;
  }

  // The token handshake (auth.h), before any request: HELLO gets the challenge, a proof with
  // the right HMAC (any proof when the server has no token) gets 01, anything else closes when
  // the server requires authentication; without that requirement, a first byte other than
  // HELLO skips the handshake.
  void model_handshake(Conn& c, size_t consumed, bool* closes) {
    auto bytes = as_bytes(c.sent);
    while (c.auth != Conn::Auth::kDone && c.modelled < c.sent.size()) {
      if (c.auth == Conn::Auth::kNone) {
        const bool mutual = bytes[c.modelled] == auth::kHelloMutual;
        if (bytes[c.modelled] != auth::kHello && !mutual) {
          if (must_authenticate_) {
            DetectStatus d = bytes[c.modelled] == 0x00 ? detect_dialect(bytes.subspan(c.modelled))
                                                       : DetectStatus::kLegacy;
            if (d == DetectStatus::kNeedMore) return;
            if (d == DetectStatus::kLegacy) {
              *closes = true;
              return;
            }
            c.liveness_only = true;
          }
          c.auth = Conn::Auth::kDone;
          return;
        }
        const size_t hello_bytes = mutual ? 1 + auth::kNonceBytes : 1;
        if (c.sent.size() - c.modelled < hello_bytes) return;
        COHORT_FUZZ_CHECK(consumed >= c.modelled + hello_bytes, "HELLO not taken");
        std::string all = c.stream + c.h->output().flatten();
        COHORT_FUZZ_CHECK(c.stream_base == 0 && all.size() >= auth::kChallengeBytes,
                          "no challenge after HELLO");
        c.challenge = all.substr(0, auth::kChallengeBytes);
        c.expect.push_back(Expect{c.challenge});
        if (mutual) {  // the server's proof follows its challenge
          c.nonce = c.sent.substr(c.modelled + 1, auth::kNonceBytes);
          c.expect.push_back(
              Expect{auth::prove_mutual(options_.auth_token, "server", c.nonce, c.challenge)});
        }
        c.modelled += hello_bytes;
        c.auth = Conn::Auth::kChallenged;
        continue;
      }
      if (c.sent.size() - c.modelled < 1 + auth::kProofBytes) return;
      std::string_view proof(c.sent.data() + c.modelled + 1, auth::kProofBytes);
      bool right = bytes[c.modelled] == auth::kProof &&
                   (options_.auth_token.empty() ||
                    proof == (c.nonce.empty() ? auth::prove(options_.auth_token, c.challenge)
                                              : auth::prove_mutual(options_.auth_token, "client",
                                                                   c.nonce, c.challenge)));
      if (!right) {
        *closes = true;
        return;
      }
      c.expect.push_back(Expect{std::string(1, static_cast<char>(auth::kAccepted))});
      c.modelled += 1 + auth::kProofBytes;
      c.auth = Conn::Auth::kDone;
    }
  }

  static std::span<const uint8_t> as_bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  // Takes the handler's output and matches it against the replies owed.
  void match(Conn& c) {
    if (kTrace && !c.h->output().empty())
      std::fprintf(stderr, "  session %llu -> %s%s\n", static_cast<unsigned long long>(c.id),
                   hex(c.h->output().flatten()).c_str(), c.h->waiting() ? " (waiting)" : "");
    c.stream += c.h->output().flatten();
    c.h->output().clear();
    std::string_view all = c.stream;
    size_t p = 0;
    for (;;) {
      if (!c.notes.empty() && c.notes.front().offset == c.stream_base + p) {
        const std::string& n = c.notes.front().bytes;
        COHORT_FUZZ_CHECK(all.substr(p, n.size()) == n, "watch notification garbled");
        p += n.size();
        c.notes.pop_front();
        continue;
      }
      if (c.expect.empty() || c.expect.front().parked) break;
      // A reply never straddles a notification.
      size_t end = c.notes.empty() ? all.size() : c.notes.front().offset - c.stream_base;
      COHORT_FUZZ_CHECK(end >= p && end <= all.size(), "notification at %zu, reply at %zu", end, p);
      const std::string& want = c.expect.front().bytes;
      if (end - p < want.size()) break;
      COHORT_FUZZ_CHECK(all.substr(p, want.size()) == want, "session %llu replied %s, owed %s",
                        static_cast<unsigned long long>(c.id),
                        hex(all.substr(p, want.size())).c_str(), hex(want).c_str());
      p += want.size();
      c.expect.pop_front();
    }
    COHORT_FUZZ_CHECK(p == all.size(),
                      "session %llu: %zu bytes of output are not the replies owed (%zu owed)",
                      static_cast<unsigned long long>(c.id), all.size() - p, c.expect.size());
    COHORT_FUZZ_CHECK(c.notes.empty(), "a notification was not where it was delivered");
    if (c.h->waiting()) {
      COHORT_FUZZ_CHECK(c.expect.size() == 1 && c.expect.front().parked,
                        "waiting with %zu replies owed", c.expect.size());
    } else {
      COHORT_FUZZ_CHECK(
          c.expect.empty(), "session %llu: %zu replies owed (%s)",
          static_cast<unsigned long long>(c.id), c.expect.size(),
          c.expect.front().parked ? "a parked WAIT" : hex(c.expect.front().bytes).c_str());
    }
    c.stream.erase(0, p);
    c.stream_base += p;
  }

  const StoreServerOptions& options_;
  const bool must_authenticate_;
  ShadowJournal journal_;  // declared before state_, which points to it
  StoreState state_;
  ServerCounters counters_;  // counted as the server counts (the metrics' code runs too)
  StoreModel model_;
  std::array<Conn, kSlots> conns_;
  std::vector<SessionId> told_;  // on_wait_satisfied calls during the current process()
  SessionId next_id_ = 1;
};

StoreServerOptions options_from(uint8_t config) {
  StoreServerOptions o;
  static constexpr size_t kWaiters[] = {0, 1, 2, 5};
  static constexpr uint64_t kRequestBytes[] = {64, 300, 4096, 256ull << 20};
  o.max_waiters = kWaiters[config & 3];
  if (config & 4) o.limits = Limits{16, 32, 4};
  o.max_request_bytes = kRequestBytes[(config >> 3) & 3];
  if (config & 0x40) o.auth_token = kToken;  // 0x20: connections must authenticate
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  StoreServerOptions options = options_from(data[0]);
  Harness server(options, /*must_authenticate=*/(data[0] & 0x20) != 0);
  size_t i = 1;
  for (size_t records = 0; records < kMaxRecords && i < size; ++records) {
    uint8_t hdr = data[i++];
    size_t slot = hdr % kSlots;
    uint8_t kind = hdr / kSlots;
    if (kind < kRawBelow || kind >= kAuthBelow) {
      size_t times = 1;
      if (kind >= kBytewiseBelow) times = 1 + (i < size ? data[i++] : 0) * 16;
      size_t len = i < size ? data[i++] : 0;
      len = std::min(len, size - i);
      std::string_view bytes(reinterpret_cast<const char*>(data + i), len);
      i += len;
      if (kind < kRawBelow) {
        server.send(slot, bytes);
      } else if (kind < kBytewiseBelow) {
        for (char b : bytes) server.send(slot, std::string_view(&b, 1));
      } else if (!bytes.empty()) {
        std::string many;
        for (size_t t = 0; t < times && many.size() < kMaxRepeated; ++t) many += bytes;
        server.send(slot, many);
      }
    } else if (kind < kRequestBelow) {
      uint8_t sel[4] = {0, 0, 0, 0};
      for (uint8_t& s : sel)
        if (i < size) s = data[i++];
      int tag = -1;
      if (kind >= kPlainRequestBelow) tag = i < size ? data[i++] : 0;
      server.send_request(slot, sel, tag);
    } else if (kind < kCloseBelow) {
      server.close(slot);
    } else {
      server.authenticate(slot);
    }
    server.turn();
    server.check();
  }
  server.finish();
  return 0;
}
