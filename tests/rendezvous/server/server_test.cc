// The store server over real sockets: exact replies in both dialects, streaming parse, limits,
// disconnects, floods and thousands of clients.
#include "cohort/rdzv/server.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "../hex.h"
#include "../raw_client.h"
#include "cohort/error.h"
#include "cohort/rdzv/auth.h"
#include "cohort/rdzv/cohortd.h"
#include "cohort/rdzv/tcp_store.h"
#include "server/listener.h"

namespace cohort::rdzv {
namespace {

using cohort::testing::hex;
using cohort::testing::RawClient;
using cohort::testing::unhex;
using namespace std::chrono_literals;

StoreServerOptions local(StoreServerOptions o = {}) {
  o.host = "127.0.0.1";
  o.port = 0;
  return o;
}

// Polls `pred` until it holds or `timeout` passes.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 5000ms) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

std::string S(std::string_view s) {  // a wire string: u64 length + bytes
  std::string out;
  put_bytes(&out, s);
  return out;
}

TEST(StoreServer, AnswersThe113CaptureByteForByte) {
  StoreServerThread server(local());
  RawClient c(server.port());
  c.send(unhex("03 0500000000000000 696e69742f 0100000000000000"));  // ADD init/ 1
  EXPECT_EQ(hex(*c.read(8)), "0100000000000000");
  c.send(unhex("00"));  // SET split over two segments, as the 1.13 client's MSG_MORE sends it
  c.send(unhex("0200000000000000 2f6b 0200000000000000 7631"));
  c.send(unhex("05 0100000000000000 0200000000000000 2f6b"));  // WAIT [/k]
  EXPECT_EQ(hex(*c.read(1)), "00");
  c.send(unhex("02 0200000000000000 2f6b"));  // GET /k
  EXPECT_EQ(hex(*c.read(10)),
            "0200000000000000"
            "7631");
  c.send(unhex("03 0400000000000000 2f636e74 0500000000000000"));
  EXPECT_EQ(hex(*c.read(8)), "0500000000000000");
  c.send(unhex("03 0400000000000000 2f636e74 feffffffffffffff"));
  EXPECT_EQ(hex(*c.read(8)), "0300000000000000");
  c.send(unhex("02 0400000000000000 2f636e74"));
  EXPECT_EQ(hex(*c.read(9)),
            "0100000000000000"
            "33");
  c.send(unhex("01 0200000000000000 2f6b 0200000000000000 7631 0200000000000000 7632"));
  EXPECT_EQ(hex(*c.read(10)),
            "0200000000000000"
            "7632");
  c.send(unhex("01 0200000000000000 2f6b 0200000000000000 7a7a 0200000000000000 7633"));
  EXPECT_EQ(hex(*c.read(10)),
            "0200000000000000"
            "7632");
  c.send(unhex("01 0600000000000000 2f6e6f6b6579 0300000000000000 657870 0300000000000000 646573"));
  EXPECT_EQ(hex(*c.read(11)),
            "0300000000000000"
            "657870");
  c.send(unhex("01 0700000000000000 2f6e6f6b657932 0000000000000000 0300000000000000 646573"));
  EXPECT_EQ(hex(*c.read(11)),
            "0300000000000000"
            "646573");
  c.send(unhex("06 06"));  // two pipelined GETNUMKEYS: init/, /k, /cnt, /nokey2
  EXPECT_EQ(hex(*c.read(16)),
            "0400000000000000"
            "0400000000000000");
  c.send(unhex("08 0200000000000000 2f6b"));
  EXPECT_EQ(hex(*c.read(8)), "0100000000000000");
  c.send(unhex("08 0200000000000000 2f6b"));
  EXPECT_EQ(hex(*c.read(8)), "0000000000000000");
  c.send(unhex("04 0200000000000000 0200000000000000 2f6b 0400000000000000 2f636e74"));  // CHECK
  EXPECT_EQ(hex(*c.read(1)), "01");
  c.send(unhex("04 0100000000000000 0400000000000000 2f636e74"));
  EXPECT_EQ(hex(*c.read(1)), "00");
}

TEST(StoreServer, LateSetWakesA113Wait) {
  StoreServerThread server(local());
  RawClient waiter(server.port()), setter(server.port());
  waiter.send(unhex("05 0100000000000000 0500000000000000 2f6c617465"));  // WAIT [/late]
  EXPECT_TRUE(waiter.silent_for(100ms));
  setter.send(unhex("00 0500000000000000 2f6c617465 0100000000000000 78"));
  EXPECT_EQ(hex(*waiter.read(1)), "00");
}

TEST(StoreServer, WatchKeyNotifies113Watchers) {
  StoreServerThread server(local());
  RawClient watcher(server.port()), setter(server.port());
  watcher.send(unhex("07 0200000000000000 2f77"));
  EXPECT_EQ(hex(*watcher.read(1)), "03");
  setter.send(unhex("00 0200000000000000 2f77 0300000000000000 6e6577"));
  EXPECT_EQ(hex(*watcher.read(30)),
            "01"
            "0200000000000000"
            "2f77"
            "0000000000000000"
            "0300000000000000"
            "6e6577");
}

// A connection that watches a key and writes it: the notification first, then the write's reply,
// whether the write is tagged (cohortd's retry-safe form) or not (a fuzzer found the tagged one
// answered first).
TEST(StoreServer, AWatcherThatWritesItsKeyIsNotifiedBeforeTheReply) {
  StoreServerThread server(local());
  RawClient c(server.port());
  c.send(unhex("07 0200000000000000 2f77"));  // WATCH_KEY /w
  EXPECT_EQ(hex(*c.read(1)), "03");
  const std::string del = "08 0200000000000000 2f77";  // DELETE_KEY /w
  for (const std::string& tag :
       {std::string(), std::string("40 0700000000000000 0100000000000000")}) {
    c.send(unhex("00 0200000000000000 2f77 0100000000000000 78"));  // SET /w x
    EXPECT_EQ(hex(*c.read(1 + 8 + 2 + 8 + 8 + 1)),
              "01"
              "0200000000000000"
              "2f77"
              "0000000000000000"
              "0100000000000000"
              "78");
    c.send(unhex(tag + del));
    EXPECT_EQ(hex(*c.read(1 + 8 + 2 + 8 + 1 + 8 + 8)),
              "02"
              "0200000000000000"
              "2f77"
              "0100000000000000"
              "78"
              "0000000000000000"
              "0100000000000000")
        << (tag.empty() ? "untagged" : "tagged");
  }
}

TEST(StoreServer, NewerDialectExactlyAsA2xClientSendsIt) {
  StoreServerThread server(local());
  RawClient c(server.port());
  // VALIDATE + PING(4242) in one buffer, as SendBuffer flushes them.
  c.send(unhex("00 cef7853c") + unhex("0d 92100000"));
  EXPECT_EQ(hex(*c.read(4)), "92100000");
  c.send(unhex("01") + S("/k") + S("v1"));         // SET
  c.send(unhex("06 0100000000000000") + S("/k"));  // WAIT
  EXPECT_EQ(hex(*c.read(1)), "00");
  c.send(unhex("03") + S("/k"));  // GET
  EXPECT_EQ(*c.read(10), S("v1"));
  c.send(unhex("03") + S("/missing"));  // GET missing: empty (libuv)
  EXPECT_EQ(*c.read(8), S(""));
  c.send(unhex("04") + S("/n") + unhex("0700000000000000"));  // ADD 7
  EXPECT_EQ(hex(*c.read(8)), "0700000000000000");
  c.send(unhex("09") + S("/a") + S("ab"));  // APPEND
  c.send(unhex("09") + S("/a") + S("cd"));
  c.send(unhex("0b 0200000000000000") + S("/m1") + S("x") + S("/m2") + S("yy"));  // MULTI_SET
  c.send(unhex("0a 0300000000000000") + S("/a") + S("/m1") + S("/m2"));           // MULTI_GET
  EXPECT_EQ(*c.read(8 + 4 + 8 + 1 + 8 + 2), S("abcd") + S("x") + S("yy"));
  c.send(unhex("07"));  // GETNUMKEYS
  EXPECT_EQ(hex(*c.read(8)), "0500000000000000");
  c.send(unhex("05 0100000000000000") + S("/nope"));  // CHECK
  EXPECT_EQ(hex(*c.read(1)), "01");
  c.send(unhex("08") + S("/n"));  // DELETE_KEY
  EXPECT_EQ(hex(*c.read(8)), "0100000000000000");
  c.send(unhex("0e") + S("q") + S("one"));  // QUEUE_PUSH
  c.send(unhex("0e") + S("q") + S("two"));
  c.send(unhex("10") + S("q"));  // QUEUE_LEN
  EXPECT_EQ(hex(*c.read(8)), "0200000000000000");
  c.send(unhex("0f") + S("q"));  // QUEUE_POP: length, then value
  EXPECT_EQ(*c.read(8 + 11), unhex("0200000000000000") + S("one"));
  c.send(unhex("0f") + S("empty"));
  EXPECT_EQ(hex(*c.read(8)), "0000000000000000");
}

TEST(StoreServer, CancelWaitAnswersCanceledAndReleasesTheWait) {
  StoreServerThread server(local());
  RawClient c(server.port());
  c.send(unhex("00 cef7853c"));
  c.send(unhex("06 0100000000000000") + S("/never"));
  EXPECT_TRUE(c.silent_for(50ms));
  EXPECT_TRUE(eventually([&] { return server.stats().parked_waits == 1; }));
  c.send(unhex("0c"));
  EXPECT_EQ(hex(*c.read(1)), "01");
  EXPECT_EQ(server.stats().parked_waits, 0u);
  // The connection stays usable, and a later SET sends no stray STOP_WAITING.
  c.send(unhex("01") + S("/never") + S("x"));
  c.send(unhex("07"));
  EXPECT_EQ(hex(*c.read(8)), "0100000000000000");
}

TEST(StoreServer, RequestsAfterAParkedWaitKeepTheirOrder) {
  StoreServerThread server(local());
  RawClient c(server.port()), setter(server.port());
  // The current dialect, VALIDATE then WAIT and GETNUMKEYS pipelined: the count must come after
  // STOP_WAITING, not before.
  c.send(unhex("00 cef7853c 06 0100000000000000") + S("/k") + unhex("07"));
  EXPECT_TRUE(c.silent_for(100ms));
  setter.send(unhex("00") + S("/k") + S("v"));
  EXPECT_EQ(hex(*c.read(9)),
            "00"
            "0100000000000000");
}

TEST(StoreServer, A113RequestAfterATimedOutWaitIsAnsweredAndTheWaitDropped) {
  // 1.13 cannot cancel a WAIT; its client sends again only after the WAIT timed out. PyTorch's
  // daemon answers that request, so cohortd must too, and never send the dead wait's reply.
  StoreServerThread server(local());
  RawClient c(server.port()), setter(server.port());
  c.send(unhex("05 0100000000000000") + S("/k"));
  ASSERT_TRUE(eventually([&] { return server.stats().parked_waits == 1; }));
  c.send(unhex("06"));  // GETNUMKEYS
  EXPECT_EQ(hex(*c.read(8)), "0000000000000000");
  EXPECT_EQ(server.stats().parked_waits, 0u);
  setter.send(unhex("00") + S("/k") + S("v"));
  c.send(unhex("06"));
  EXPECT_EQ(hex(*c.read(8)), "0100000000000000");  // no stray STOP_WAITING before the count
}

TEST(StoreServer, HalfSentRequestDelaysNobodyElse) {
  // PyTorch 1.13's server blocks in recv() here and stalls every client.
  StoreServerThread server(local());
  RawClient staller(server.port());
  staller.send(unhex("00 ce f7"));  // first bytes of a VALIDATE, then silence
  RawClient other_staller(server.port());
  other_staller.send(unhex("00 0a00000000000000 2f6b6579"));  // a SET cut inside its key
  RawClient c(server.port());
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) {
    c.send(unhex("03") + S("/ctr") + unhex("0100000000000000"));
    auto r = c.read(8, 2000ms);
    ASSERT_TRUE(r) << "request " << i << " stalled";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // The half-sent SET completes whenever its bytes arrive.
  other_staller.send(unhex("2f6b6579 0100 0000000000000000"));
  other_staller.send(unhex("06"));
  EXPECT_TRUE(other_staller.read(8));
}

TEST(StoreServer, OverLimitRequestClosesOnlyThatConnection) {
  StoreServerOptions o = local();
  o.limits.max_key_bytes = 32;
  o.limits.max_value_bytes = 64;
  o.limits.max_keys_per_request = 4;
  StoreServerThread server(o);
  RawClient good(server.port());
  good.send(unhex("00") + S("/k") + S("v"));

  RawClient big_key(server.port());
  big_key.send(unhex("00") + S(std::string(33, 'k')) + S("v"));
  EXPECT_TRUE(big_key.closed_by_peer());
  RawClient big_value(server.port());
  big_value.send(unhex("00") + S("/k") + unhex("4100000000000000"));  // announces 65 bytes
  EXPECT_TRUE(big_value.closed_by_peer());
  RawClient many_keys(server.port());
  many_keys.send(unhex("05 0500000000000000"));
  EXPECT_TRUE(many_keys.closed_by_peer());
  RawClient unknown(server.port());
  unknown.send(unhex("2a"));
  EXPECT_TRUE(unknown.closed_by_peer());
  RawClient bad_add(server.port());
  bad_add.send(unhex("03") + S("/k") + unhex("0100000000000000"));  // "/k" holds "v"
  EXPECT_TRUE(bad_add.closed_by_peer());
  RawClient missing_get(server.port());
  missing_get.send(unhex("02") + S("/nothing"));  // 1.13 dialect closes on a missing key
  EXPECT_TRUE(missing_get.closed_by_peer());

  EXPECT_TRUE(eventually([&] { return server.stats().closed_for_limit == 6; }));
  good.send(unhex("02") + S("/k"));
  EXPECT_EQ(*good.read(9), S("v"));
}

TEST(StoreServer, ClientKilledMidWaitIsForgotten) {
  StoreServerThread server(local());
  int port = server.port();
  pid_t child = ::fork();
  if (child == 0) {
    // Only async-signal-safe calls here: a raw socket, the WAIT, then block forever.
    RawClient c(port);
    c.send(unhex("05 0100000000000000 0500000000000000 2f6e657672"));
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  ASSERT_TRUE(eventually([&] { return server.stats().parked_waits == 1; }));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(eventually([&] { return server.stats().parked_waits == 0; }));
  RawClient c(port);
  c.send(unhex("00") + S("/nevr") + S("x") + unhex("06"));
  EXPECT_EQ(hex(*c.read(8)), "0100000000000000");
  EXPECT_EQ(server.stats().connections, 1u);
}

TEST(StoreServer, FloodBeyondMaxConnectionsSparesEstablishedClients) {
  StoreServerOptions o = local();
  o.max_connections = 8;
  StoreServerThread server(o);
  std::vector<RawClient> established;
  for (int i = 0; i < 8; ++i) {
    established.emplace_back(server.port());
    established.back().send(unhex("06"));
    ASSERT_TRUE(established.back().read(8));
  }
  std::vector<RawClient> flood;
  for (int i = 0; i < 64; ++i) flood.emplace_back(server.port());
  for (auto& f : flood) EXPECT_TRUE(f.closed_by_peer());
  EXPECT_EQ(server.stats().refused, 64u);
  for (auto& c : established) {
    c.send(unhex("03") + S("/n") + unhex("0100000000000000"));
    EXPECT_TRUE(c.read(8));
  }
}

TEST(StoreServer, OneAddressCannotHoldMoreThanItsShare) {
  StoreServerOptions o = local();
  o.max_connections_per_address = 4;
  StoreServerThread server(o);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) held.push_back(std::make_unique<RawClient>(server.port()));
  ASSERT_TRUE(eventually([&] { return server.stats().connections == 4; }));
  RawClient over(server.port());
  EXPECT_TRUE(over.closed_by_peer());
  EXPECT_EQ(server.stats().refused, 1u);
  held.pop_back();  // one goes: its slot is free again
  ASSERT_TRUE(eventually([&] { return server.stats().connections == 3; }));
  RawClient again(server.port());
  again.send(unhex("06"));  // GETNUMKEYS, 1.13 dialect
  EXPECT_TRUE(again.read(8));
}

TEST(StoreServer, AtItsShareTheOldestHalfHandshakeOfAnAddressGivesWayToANewcomer) {
  StoreServerOptions o = local();
  o.max_connections_per_address = 4;
  o.auth_token = "s3cret-token-of-some-length";
  StoreServerThread server(o);
  // The address's share: one authenticated connection and three half handshakes.
  TcpStoreOptions c;
  c.port = server.port();
  c.auth_token = o.auth_token;
  c.timeout = 5s;
  TcpStore holder(c);
  std::vector<std::unique_ptr<RawClient>> half;
  for (int i = 0; i < 3; ++i) {
    half.push_back(std::make_unique<RawClient>(server.port()));
    half.back()->send(unhex("41"));  // HELLO, then never the proof
    ASSERT_TRUE(half.back()->read(auth::kChallengeBytes));
  }
  // A newcomer takes the place of the oldest half handshake, not of the authenticated one, and
  // completes its own handshake.
  TcpStore newcomer(c);
  newcomer.set("k", "v");
  EXPECT_EQ(holder.get("k"), "v");
  EXPECT_TRUE(half[0]->closed_by_peer(2s)) << "the oldest half handshake was kept";
  EXPECT_TRUE(half[1]->silent_for(200ms)) << "a younger one gave way too";
  EXPECT_EQ(server.stats().refused, 0u);
  EXPECT_TRUE(eventually([&] { return server.stats().connections == 4; }));
}

// The current dialect's bytes: VALIDATE, then whatever follows.
std::string validated(std::string rest) {
  return unhex("00cef7853c") + rest;
}

TEST(StoreServer, WritesPastMaxMemoryCloseTheirConnectionReadsAndDeletesGoOn) {
  StoreServerOptions o = local();
  o.max_memory = 1000;
  StoreServerThread server(o);
  const std::string v600(600, 'a'), v300(300, 'b');
  RawClient writer(server.port());
  // SET k1 (602 bytes with its key), then SET k2 (302 more): 904 of 1000.
  writer.send(validated(unhex("01") + S("k1") + S(v600) + unhex("01") + S("k2") + S(v300) +
                        unhex("05") + unhex("0100000000000000") + S("k2")));  // CHECK k2
  ASSERT_EQ(writer.read(1), unhex("00"));
  // 200 bytes more would be 1106: the connection is closed, and the key not written.
  writer.send(unhex("01") + S("k3") + S(std::string(198, 'c')));
  EXPECT_TRUE(writer.closed_by_peer());
  // Another client reads what is there; a SET that replaces a value with a shorter one, and
  // DELETE_KEY, add nothing and go on; the freed room takes a new key.
  RawClient reader(server.port());
  reader.send(validated(unhex("03") + S("k1")));  // GET
  EXPECT_EQ(reader.read(8 + 600), S(v600));
  reader.send(unhex("05") + unhex("0100000000000000") + S("k3"));  // CHECK k3: never written
  EXPECT_EQ(reader.read(1), unhex("01"));
  reader.send(unhex("01") + S("k2") + S("short") + unhex("08") + S("k1"));  // SET, DELETE_KEY
  EXPECT_EQ(reader.read(8), unhex("0100000000000000"));
  reader.send(unhex("01") + S("k3") + S(std::string(198, 'c')) + unhex("05") +
              unhex("0100000000000000") + S("k3"));
  EXPECT_EQ(reader.read(1), unhex("00"));
  const std::string m = server.metrics_text();
  EXPECT_NE(m.find("cohortd_requests_rejected_total{reason=\"max_memory\"} 1"), std::string::npos)
      << m;
  EXPECT_NE(m.find("cohortd_max_memory_bytes 1000"), std::string::npos) << m;
  EXPECT_NE(m.find("cohortd_stored_bytes 207"), std::string::npos) << m;  // k2 short, k3
}

TEST(StoreServer, AHandshakeNeverFinishedIsClosedAtItsTimeout) {
  StoreServerOptions o = local();
  o.auth_token = "s3cret-token";
  o.handshake_timeout = 300ms;
  StoreServerThread server(o);
  const auto start = std::chrono::steady_clock::now();
  RawClient silent(server.port());  // sends nothing
  RawClient half(server.port());
  half.send(unhex("41"));  // HELLO, then never the proof
  ASSERT_TRUE(half.read(auth::kChallengeBytes));
  EXPECT_TRUE(silent.closed_by_peer());
  EXPECT_TRUE(half.closed_by_peer());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_TRUE(eventually([&] { return server.stats().refused_unauthenticated == 2; }));
  EXPECT_TRUE(eventually([&] { return server.stats().connections == 0; }));
}

TEST(StoreServer, WithoutATokenAConnectionThatNeverSpeaksIsClosedAtTheFirstRequestTimeout) {
  StoreServerOptions o = local();
  o.first_request_timeout = 300ms;
  StoreServerThread server(o);
  const auto start = std::chrono::steady_clock::now();
  RawClient silent(server.port());
  EXPECT_TRUE(silent.closed_by_peer());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_TRUE(eventually([&] { return server.stats().closed_silent == 1; }));
  RawClient spoke(server.port());
  spoke.send(unhex("06"));  // GETNUMKEYS, 1.13 dialect
  ASSERT_TRUE(spoke.read(8));
  // The one that spoke is kept, idle as PyTorch's clients are, past the deadline.
  EXPECT_FALSE(spoke.closed_by_peer(400ms));
  spoke.send(unhex("06"));
  EXPECT_TRUE(spoke.read(8));
  EXPECT_EQ(server.stats().connections, 1u);
  EXPECT_EQ(server.stats().closed_silent, 1u);
}

// PyTorch 1.13's TCPStore opens a second connection beside its first that stays silent unless
// watch_key is called (its thread spins on a core once that connection is closed): a silent
// connection from an address that holds one that spoke is kept.
TEST(StoreServer, ASilentConnectionBesideOneThatSpokeIsKept) {
  StoreServerOptions o = local();
  o.first_request_timeout = 300ms;
  StoreServerThread server(o);
  RawClient main(server.port());
  main.send(unhex("03") + S("init/") + unhex("0100000000000000"));  // 1.13's ADD init/ 1
  ASSERT_TRUE(main.read(8));
  RawClient callback(server.port());  // silent
  EXPECT_FALSE(callback.closed_by_peer(600ms));
  callback.send(unhex("07") + S("/w"));  // watch_key, much later
  EXPECT_EQ(hex(*callback.read(1)), "03");
  EXPECT_EQ(server.stats().closed_silent, 0u);
  EXPECT_EQ(server.stats().connections, 2u);
}

TEST(StoreServer, IdleTimeoutClosesQuietConnectionsWithNothingParked) {
  StoreServerOptions o = local();
  // 1 s, and a chatty client that speaks every 100 ms or so: a test thread descheduled for most
  // of a second on a loaded machine (300 ms failed there) still never leaves it idle that long.
  o.idle_timeout = 1000ms;
  StoreServerThread server(o);
  RawClient idle(server.port());
  // Taken before the request: the server's last sight of this client is no earlier, so the idle
  // close cannot come sooner than 1 s after it (after the reply is read, it can: by the reply's
  // own latency).
  const auto spoke = std::chrono::steady_clock::now();
  idle.send(unhex("06"));
  ASSERT_TRUE(idle.read(8));
  RawClient waiter(server.port());
  waiter.send(unhex("05 0100000000000000") + S("/later"));  // a WAIT, parked
  RawClient watcher(server.port());
  watcher.send(unhex("07") + S("/w"));  // 1.13 WATCH_KEY
  EXPECT_EQ(hex(*watcher.read(1)), "03");
  RawClient chatty(server.port());
  // A client that speaks every 100 ms is never idle for 1 s; the idle one goes meanwhile.
  std::optional<std::chrono::steady_clock::time_point> idle_closed;
  while (std::chrono::steady_clock::now() - spoke < 2500ms) {
    chatty.send(unhex("06"));
    ASSERT_TRUE(chatty.read(8));
    if (!idle_closed && idle.closed_by_peer(100ms)) idle_closed = std::chrono::steady_clock::now();
  }
  ASSERT_TRUE(idle_closed || idle.closed_by_peer());
  if (idle_closed) {
    EXPECT_GE(*idle_closed - spoke, 1000ms);
  }
  EXPECT_EQ(server.stats().closed_silent, 1u);
  // The parked WAIT and the watcher stayed, and still work.
  RawClient setter(server.port());
  setter.send(unhex("00") + S("/later") + S("x") + unhex("00") + S("/w") + S("y"));
  EXPECT_EQ(hex(*waiter.read(1)), "00");  // STOP_WAITING
  EXPECT_TRUE(watcher.read(1 + 8 + 2 + 8 + 8 + 1));
}

TEST(StoreServer, FiveThousandSimultaneousClients) {
  raise_fd_limit();
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  constexpr int kClients = 5000;
  if (rl.rlim_cur < 2 * kClients + 100) GTEST_SKIP() << "descriptor limit " << rl.rlim_cur;
  StoreServerOptions o = local();
  o.max_connections_per_address = 0;  // all 5,000 come from 127.0.0.1
  StoreServerThread server(o);
  std::vector<RawClient> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back(server.port());
    // ADD arrivals, then WAIT for the release key: a rendezvous barrier of 5,000.
    clients.back().send(unhex("03") + S("/arrived") + unhex("0100000000000000") +
                        unhex("05 0100000000000000") + S("/go"));
  }
  std::vector<bool> seen(kClients + 1, false);
  for (auto& c : clients) {
    auto r = c.read(8, 10000ms);
    ASSERT_TRUE(r);
    int64_t v;
    std::memcpy(&v, r->data(), 8);
    ASSERT_GE(v, 1);
    ASSERT_LE(v, kClients);
    EXPECT_FALSE(seen[v]) << "two clients got count " << v;
    seen[v] = true;
  }
  EXPECT_TRUE(eventually([&] { return server.stats().parked_waits == kClients; }, 10000ms));
  RawClient releaser(server.port());
  releaser.send(unhex("00") + S("/go") + S("1"));
  for (auto& c : clients) ASSERT_EQ(hex(*c.read(1, 10000ms)), "00");
  EXPECT_EQ(server.stats().connections, static_cast<size_t>(kClients + 1));
}

TEST(StoreServer, StopClosesEveryConnection) {
  auto server = std::make_unique<StoreServerThread>(local());
  RawClient a(server->port()), b(server->port());
  a.send(unhex("05 0100000000000000") + S("/x"));  // parked
  server.reset();
  EXPECT_TRUE(a.closed_by_peer());
  EXPECT_TRUE(b.closed_by_peer());
}

TEST(StoreServer, BindFailureNamesTheAddress) {
  StoreServerThread first(local());
  StoreServerOptions o = local();
  o.port = first.port();
  try {
    StoreServerThread second(o);
    FAIL() << "second bind succeeded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(first.port())),
              std::string::npos)
        << e.what();
  }
}

TEST(StoreServer, APortHeldByOneSocketIsRefusedToSeveralAndTheReverse) {
  // Several accept queues are SO_REUSEPORT sockets; the port is first bound without it, so a
  // port in use is refused however many queues either side has.
  for (auto [first_queues, second_queues] : {std::pair{1, 4}, std::pair{4, 1}, std::pair{4, 4}}) {
    StoreServerOptions o = local();
    o.accept_queues = first_queues;
    StoreServerThread first(o);
    o.port = first.port();
    o.accept_queues = second_queues;
    EXPECT_THROW(StoreServerThread second(o), cohort::Error)
        << first_queues << " then " << second_queues;
  }
}

TEST(StoreServer, SeveralAcceptQueuesServeOnePort) {
  StoreServerOptions o = local();
  o.accept_queues = 4;
  StoreServerThread server(o);
  EXPECT_EQ(server.stats().accept_queues, 4);
  std::vector<RawClient> clients;
  for (int i = 0; i < 64; ++i) clients.emplace_back(server.port());  // the kernel spreads them
  for (auto& c : clients) c.send(unhex("03") + S("/n") + unhex("0100000000000000"));
  for (auto& c : clients) ASSERT_TRUE(c.read(8));
  EXPECT_EQ(server.stats().connections, 64u);
}

TEST(StoreServer, DefaultAcceptQueuesHoldAboutThirtyTwoThousandConnections) {
  StoreServerThread server(local());
  const StoreServerStats s = server.stats();
  EXPECT_GE(s.accept_queues, 1);
  EXPECT_LE(s.accept_queues, 8);
  EXPECT_EQ(s.accept_queue_length, system_somaxconn());
  EXPECT_GE(s.accept_queues * s.accept_queue_length, std::min(32768, 8 * s.accept_queue_length));
}

}  // namespace
}  // namespace cohort::rdzv

namespace cohort::rdzv {
namespace {

TEST(StoreServer, HalfARequestPastTheRequestTimeoutClosesOnlyThatConnection) {
  StoreServerOptions o = local();
  o.request_timeout = 200ms;
  StoreServerThread server(o);
  RawClient slow(server.port()), idle(server.port()), busy(server.port());
  slow.send(unhex("00 0a00000000000000 2f6b"));  // a SET cut inside its key, then silence
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(slow.closed_by_peer(5000ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  EXPECT_TRUE(idle.silent_for(50ms));  // an idle client is not a slow one
  idle.send(unhex("06"));
  EXPECT_TRUE(idle.read(8));
  // A parked WAIT is not a half request either.
  busy.send(unhex("05 0100000000000000") + S("/later"));
  EXPECT_TRUE(busy.silent_for(400ms));
  RawClient setter(server.port());
  setter.send(unhex("00") + S("/later") + S("x"));
  EXPECT_EQ(hex(*busy.read(1)), "00");
}

}  // namespace
}  // namespace cohort::rdzv
