// ProtocolHandler without a socket: bytes in, replies out, on a StoreState shared by several
// connections (as Session and Server drive it; tests/fuzz/fuzz_server.cc checks it against a
// model). Dialects, requests split anywhere, parked WAITs woken and cancelled with replies in
// request order, watches, the token handshake, and every reason to close a connection.
#include "server/protocol_handler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "cohort/rdzv/auth.h"

namespace cohort::rdzv {
namespace {

// Records the sessions whose waits are satisfied (the test wakes them, as Server does after a
// turn) and hands watch events to `deliver` at once (as Server does).
class Listener final : public StoreListener {
 public:
  void on_wait_satisfied(SessionId s) override { woken.push_back(s); }
  void on_watch_event(SessionId s, const WatchEvent& e) override {
    if (deliver) deliver(s, e);
  }
  std::vector<SessionId> woken;
  std::function<void(SessionId, const WatchEvent&)> deliver;
};

class Client {
 public:
  Client(StoreState& state, const StoreServerOptions& options, SessionId id, Dialect dialect,
         bool must_authenticate = false)
      : handler(state, options, id, must_authenticate), dialect_(dialect) {}

  // Sends `bytes` (in reads of at most `chunk`) and processes after each, as Session does;
  // false once the handler says to close.
  bool send(std::string_view bytes, size_t chunk = 1 << 20) {
    while (!bytes.empty()) {
      std::span<uint8_t> space = handler.read_space();
      const size_t n = std::min({bytes.size(), space.size(), chunk});
      std::memcpy(space.data(), bytes.data(), n);
      handler.commit(n);
      bytes.remove_prefix(n);
      if (!handler.process()) return false;
    }
    return true;
  }
  bool request(Op op, std::vector<std::string_view> keys = {},
               std::vector<std::string_view> values = {}, int64_t delta = 0, uint32_t u32 = 0) {
    Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.delta = delta;
    r.u32 = u32;
    std::string bytes;
    encode_request(dialect_, r, &bytes);
    return send(bytes);
  }
  // Everything the handler has written since the last call.
  std::string replies() {
    std::string s = handler.output().flatten();
    handler.output().clear();
    return s;
  }

  ProtocolHandler handler;

 private:
  Dialect dialect_;
};

std::string u8(uint8_t v) {
  return std::string(1, static_cast<char>(v));
}
std::string i64(int64_t v) {
  std::string s;
  put_i64(&s, v);
  return s;
}
std::string bytes(std::string_view v) {
  std::string s;
  put_bytes(&s, v);
  return s;
}
std::string validate() {
  std::string s;
  Request r;
  r.op = Op::kValidate;
  r.u32 = kValidationMagic;
  encode_request(Dialect::kCurrent, r, &s);
  return s;
}

class ProtocolHandlerTest : public ::testing::Test {
 protected:
  Client& client(Dialect d, bool must_authenticate = false) {
    clients_.push_back(
        std::make_unique<Client>(state_, options_, next_id_++, d, must_authenticate));
    return *clients_.back();
  }
  void SetUp() override {
    listener_.deliver = [this](SessionId s, const WatchEvent& e) {
      clients_.at(s - 1)->handler.deliver(e);
    };
  }

  Listener listener_;
  StoreServerOptions options_;
  StoreState state_{&listener_, 0};
  std::vector<std::unique_ptr<Client>> clients_;
  SessionId next_id_ = 1;
};

TEST_F(ProtocolHandlerTest, TheDialectIsToldFromTheFirstBytes) {
  Client& legacy = client(Dialect::kLegacy);
  EXPECT_EQ(legacy.handler.dialect_name(), "unknown");
  ASSERT_TRUE(legacy.request(Op::kSet, {"k"}, {"v"}));
  EXPECT_EQ(legacy.handler.dialect_name(), "legacy");
  Client& current = client(Dialect::kCurrent);
  ASSERT_TRUE(current.send(validate()));
  EXPECT_EQ(current.handler.dialect_name(), "current");
  ASSERT_TRUE(current.request(Op::kGet, {"k"}));
  EXPECT_EQ(current.replies(), bytes("v"));  // VALIDATE and SET have no reply
  EXPECT_EQ(current.handler.requests(), 2u);
}

TEST_F(ProtocolHandlerTest, ARequestSplitAnywhereIsAnsweredOnceWhole) {
  Client& c = client(Dialect::kCurrent);
  std::string all = validate();
  Request add;
  add.op = Op::kAdd;
  add.keys = {"counter"};
  add.delta = 5;
  encode_request(Dialect::kCurrent, add, &all);
  encode_request(Dialect::kCurrent, add, &all);
  ASSERT_TRUE(c.send(all.substr(0, all.size() - 1), /*chunk=*/1));
  EXPECT_EQ(c.replies(), i64(5));  // the second ADD lacks its last byte
  EXPECT_TRUE(c.handler.has_input());
  ASSERT_TRUE(c.send(all.substr(all.size() - 1)));
  EXPECT_EQ(c.replies(), i64(10));
  EXPECT_FALSE(c.handler.has_input());
}

TEST_F(ProtocolHandlerTest, AParkedWaitHoldsLaterRequestsUntilItIsWoken) {
  Client& waiter = client(Dialect::kCurrent);
  Client& writer = client(Dialect::kCurrent);
  ASSERT_TRUE(waiter.send(validate()));
  ASSERT_TRUE(writer.send(validate()));
  ASSERT_TRUE(waiter.request(Op::kWait, {"k"}));
  EXPECT_TRUE(waiter.handler.waiting());
  ASSERT_TRUE(waiter.request(Op::kGetNumKeys));  // held behind the WAIT
  EXPECT_EQ(waiter.replies(), "");
  ASSERT_TRUE(writer.request(Op::kSet, {"k"}, {"v"}));
  ASSERT_EQ(listener_.woken, std::vector<SessionId>{1});
  EXPECT_TRUE(waiter.handler.wake());  // requests wait behind it: process again
  EXPECT_FALSE(waiter.handler.waiting());
  ASSERT_TRUE(waiter.handler.process());
  EXPECT_EQ(waiter.replies(), u8(kStopWaiting) + i64(1));  // in request order
}

TEST_F(ProtocolHandlerTest, CancelWaitIsTheOneRequestRunWhileWaiting) {
  Client& c = client(Dialect::kCurrent);
  ASSERT_TRUE(c.send(validate()));
  ASSERT_TRUE(c.request(Op::kWait, {"never"}));
  ASSERT_TRUE(c.request(Op::kCancelWait));
  EXPECT_FALSE(c.handler.waiting());
  EXPECT_EQ(c.replies(), u8(kWaitCanceled));
  EXPECT_EQ(state_.parked_waits(), 0u);
  Client& writer = client(Dialect::kCurrent);
  ASSERT_TRUE(writer.send(validate()));
  ASSERT_TRUE(writer.request(Op::kSet, {"never"}, {"x"}));
  EXPECT_TRUE(listener_.woken.empty());  // nobody waits any more
}

TEST_F(ProtocolHandlerTest, A113RequestAfterAParkedWaitMeansItsClientGaveUp) {
  Client& c = client(Dialect::kLegacy);
  ASSERT_TRUE(c.request(Op::kWait, {"never"}));
  ASSERT_TRUE(c.request(Op::kSet, {"a"}, {"1"}));  // the 1.13 client timed out and went on
  EXPECT_FALSE(c.handler.waiting());
  EXPECT_EQ(c.replies(), "");  // the dead wait gets no reply; SET has none
  EXPECT_EQ(state_.parked_waits(), 0u);
}

TEST_F(ProtocolHandlerTest, AWatchedKeysChangesAreNotifiedIn113sForm) {
  Client& watcher = client(Dialect::kLegacy);
  ASSERT_TRUE(watcher.request(Op::kWatchKey, {"w"}));
  EXPECT_TRUE(watcher.handler.watching());
  EXPECT_EQ(watcher.replies(), u8(kWatchRegistered));
  Client& writer = client(Dialect::kLegacy);
  ASSERT_TRUE(writer.request(Op::kSet, {"w"}, {"new"}));
  ASSERT_TRUE(writer.request(Op::kSet, {"w"}, {"newer"}));
  EXPECT_EQ(watcher.replies(), u8(kWatchCreated) + bytes("w") + bytes("") + bytes("new") +
                                   u8(kWatchUpdated) + bytes("w") + bytes("new") + bytes("newer"));
  EXPECT_EQ(writer.replies(), "");  // the writer hears nothing of it
}

TEST_F(ProtocolHandlerTest, MalformedOrOverLimitRequestsCloseTheConnectionSayingWhy) {
  Client& bad = client(Dialect::kCurrent);
  ASSERT_TRUE(bad.send(validate()));
  EXPECT_FALSE(bad.send(std::string(1, '\x7f')));  // no such opcode
  EXPECT_EQ(bad.handler.rejected(), RejectReason::kMalformed);
  EXPECT_FALSE(bad.handler.close_reason().empty());

  options_.limits.max_key_bytes = 4;
  Client& long_key = client(Dialect::kLegacy);
  EXPECT_FALSE(long_key.request(Op::kSet, {"too long"}, {"v"}));
  EXPECT_EQ(long_key.handler.rejected(), RejectReason::kMalformed);
  EXPECT_FALSE(state_.get("too long"));  // nothing was written

  options_.max_request_bytes = 64;
  Client& big = client(Dialect::kLegacy);
  std::string partial;
  put_u8(&partial, 0);  // a 1.13 SET
  put_bytes(&partial, "k");
  put_u64(&partial, 1000);  // a value longer than --max-request-bytes
  partial += std::string(100, 'x');
  EXPECT_FALSE(big.send(partial));
  EXPECT_EQ(big.handler.rejected(), RejectReason::kTooLarge);
  EXPECT_EQ(big.handler.close_reason(),
            "request of more than 64 bytes exceeds --max-request-bytes");
}

TEST_F(ProtocolHandlerTest, WhatPyTorch113WouldRefuseClosesTheConnection) {
  Client& c = client(Dialect::kLegacy);
  EXPECT_FALSE(c.request(Op::kGet, {"missing"}));  // 1.13's daemon drops the connection
  EXPECT_EQ(c.handler.rejected(), RejectReason::kMissingKey);
  Client& current = client(Dialect::kCurrent);  // the libuv daemon answers empty
  ASSERT_TRUE(current.send(validate()));
  ASSERT_TRUE(current.request(Op::kGet, {"missing"}));
  EXPECT_EQ(current.replies(), bytes(""));
  state_.set("word", "seven");
  EXPECT_FALSE(current.request(Op::kAdd, {"word"}, {}, 1));
  EXPECT_EQ(current.handler.rejected(), RejectReason::kNotACounter);
}

TEST_F(ProtocolHandlerTest, TooManyParkedWaitsCloseTheOneOverTheLimit) {
  StoreState small(&listener_, 1);
  options_.max_waiters = 1;
  Client a(small, options_, 1, Dialect::kLegacy), b(small, options_, 2, Dialect::kLegacy);
  ASSERT_TRUE(a.request(Op::kWait, {"k"}));
  EXPECT_FALSE(b.request(Op::kWait, {"k"}));
  EXPECT_EQ(b.handler.rejected(), RejectReason::kTooManyWaiters);
  EXPECT_EQ(b.handler.close_reason(), "parked waits exceed --max-waiters (1)");
  EXPECT_TRUE(a.handler.waiting());
}

TEST_F(ProtocolHandlerTest, ATaggedWriteRunsOnceHoweverOftenItIsSent) {
  Client& c = client(Dialect::kCurrent);
  ASSERT_TRUE(c.send(validate()));
  std::string tagged;
  put_u8(&tagged, kTaggedOpcode);
  put_u64(&tagged, 77);  // client
  put_u64(&tagged, 1);   // request
  Request add;
  add.op = Op::kAdd;
  add.keys = {"n"};
  add.delta = 3;
  encode_request(Dialect::kCurrent, add, &tagged);
  ASSERT_TRUE(c.send(tagged));
  ASSERT_TRUE(c.send(tagged));  // a retry after a lost connection
  EXPECT_EQ(c.replies(), i64(3) + i64(3));
  EXPECT_EQ(*state_.get("n"), "3");
  // A tagged read makes no sense: refused.
  std::string read;
  put_u8(&read, kTaggedOpcode);
  put_u64(&read, 77);
  put_u64(&read, 2);
  Request get;
  get.op = Op::kGet;
  get.keys = {"n"};
  encode_request(Dialect::kCurrent, get, &read);
  EXPECT_FALSE(c.send(read));
  EXPECT_EQ(c.handler.rejected(), RejectReason::kBadRequest);
}

TEST_F(ProtocolHandlerTest, ATokenHandshakeComesBeforeAnyRequest) {
  options_.auth_token = "0123456789abcdef0123456789abcdef";
  Client& plain = client(Dialect::kLegacy, /*must_authenticate=*/true);
  EXPECT_FALSE(plain.request(Op::kSet, {"k"}, {"v"}));
  EXPECT_TRUE(plain.handler.refused_unauthenticated());
  EXPECT_EQ(plain.handler.rejected(), RejectReason::kNoToken);
  EXPECT_FALSE(state_.get("k"));

  Client& good = client(Dialect::kLegacy, true);
  ASSERT_TRUE(good.send(u8(auth::kHello)));
  const std::string challenge = good.replies();
  ASSERT_EQ(challenge.size(), auth::kChallengeBytes);
  EXPECT_FALSE(good.handler.authenticated());
  ASSERT_TRUE(good.send(u8(auth::kProof) + auth::prove(options_.auth_token, challenge)));
  EXPECT_TRUE(good.handler.authenticated());
  EXPECT_EQ(good.replies(), u8(auth::kAccepted));
  ASSERT_TRUE(good.request(Op::kSet, {"k"}, {"v"}));
  EXPECT_EQ(*state_.get("k"), "v");

  Client& wrong = client(Dialect::kLegacy, true);
  ASSERT_TRUE(wrong.send(u8(auth::kHello)));
  const std::string other = wrong.replies();
  EXPECT_FALSE(wrong.send(u8(auth::kProof) + auth::prove("not the token at all, no no no", other)));
  EXPECT_EQ(wrong.handler.rejected(), RejectReason::kWrongToken);
}

TEST_F(ProtocolHandlerTest, AnUnauthenticatedPyTorch2ClientGetsLivenessOnly) {
  options_.auth_token = "0123456789abcdef0123456789abcdef";
  Client& c = client(Dialect::kCurrent, /*must_authenticate=*/true);
  ASSERT_TRUE(c.send(validate()));
  ASSERT_TRUE(c.request(Op::kPing, {}, {}, 0, 0xabcd));
  std::string nonce;
  put_u32(&nonce, 0xabcd);
  EXPECT_EQ(c.replies(), nonce);
  EXPECT_FALSE(c.handler.authenticated());
  EXPECT_FALSE(c.request(Op::kGet, {"k"}));
  EXPECT_TRUE(c.handler.refused_unauthenticated());
}

}  // namespace
}  // namespace cohort::rdzv
