// cohort::TcpStore against cohortd's server, in both dialects. tests/rendezvous/relay/ compiles
// this file again with COHORT_TCP_STORE_TEST_VIA_RELAY: every TcpStoreTest then runs with its
// clients behind a node's store relay (cohort/rdzv/relay.h), and must pass unchanged.
#include "cohort/rdzv/tcp_store.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "cohort/rdzv/prefix_store.h"
#include "cohort/rdzv/server.h"
#ifdef COHORT_TCP_STORE_TEST_VIA_RELAY
#include "cohort/rdzv/relay.h"
#endif

namespace cohort {
namespace {

using namespace std::chrono_literals;

class TcpStoreTest : public ::testing::TestWithParam<StoreDialect> {
 protected:
  TcpStoreTest() : server_(options()) {
#ifdef COHORT_TCP_STORE_TEST_VIA_RELAY
    rdzv::StoreRelayOptions r;
    r.store_host = "127.0.0.1";
    r.store_port = server_.port();
    relay_ = std::make_unique<rdzv::StoreRelayThread>(r);
#endif
  }
  // Where the clients connect: the server, or the relay in front of it.
  int port() const {
#ifdef COHORT_TCP_STORE_TEST_VIA_RELAY
    return relay_->port();
#else
    return server_.port();
#endif
  }
  static rdzv::StoreServerOptions options() {
    rdzv::StoreServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    return o;
  }
  std::unique_ptr<TcpStore> client(std::chrono::milliseconds timeout = 5s) {
    TcpStoreOptions o;
    o.port = port();
    o.dialect = GetParam();
    o.timeout = timeout;
    o.connect_timeout = 5s;
    return std::make_unique<TcpStore>(o);
  }
  rdzv::StoreServerThread server_;
#ifdef COHORT_TCP_STORE_TEST_VIA_RELAY
  std::unique_ptr<rdzv::StoreRelayThread> relay_;
#endif
};

TEST_P(TcpStoreTest, SetGetAddCompareSet) {
  auto s = client();
  s->set("k", "v1");
  EXPECT_EQ(s->get("k"), "v1");
  EXPECT_EQ(s->add("n", 5), 5);
  EXPECT_EQ(s->add("n", -2), 3);
  EXPECT_EQ(s->get("n"), "3");
  EXPECT_EQ(s->compare_set("k", "v1", "v2"), "v2");
  EXPECT_EQ(s->compare_set("k", "zz", "v3"), "v2");
  EXPECT_EQ(s->compare_set("nokey", "exp", "des"), "exp");
  EXPECT_EQ(s->compare_set("nokey2", "", "des"), "des");
  EXPECT_EQ(s->num_keys(), 3);
  EXPECT_TRUE(s->delete_key("k"));
  EXPECT_FALSE(s->delete_key("k"));
  std::vector<std::string> keys{"n", "nokey2"};
  EXPECT_TRUE(s->check(keys));
  keys.push_back("k");
  EXPECT_FALSE(s->check(keys));
}

TEST_P(TcpStoreTest, BinaryValuesSurvive) {
  auto s = client();
  std::string blob(70000, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 7);
  s->set("blob", blob);
  EXPECT_EQ(s->get("blob"), blob);
}

TEST_P(TcpStoreTest, GetWaitsForALateSet) {
  auto reader = client();
  auto writer = client();
  auto got = std::async(std::launch::async, [&] { return reader->get("late"); });
  EXPECT_EQ(got.wait_for(100ms), std::future_status::timeout);
  writer->set("late", "here");
  EXPECT_EQ(got.get(), "here");
}

TEST_P(TcpStoreTest, WaitTimesOutWithTheKeysNamedAndTheConnectionStaysUsable) {
  auto s = client(300ms);
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> keys{"never"};
  try {
    s->wait(keys, 200ms);
    FAIL() << "wait returned";
  } catch (const StoreTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
    EXPECT_EQ(e.key(), "never");
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, 3s);
  // The server forgot the wait (cancelled, or the 1.13 connection was closed).
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server_.stats().parked_waits != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(2ms);
  EXPECT_EQ(server_.stats().parked_waits, 0u);
  s->set("never", "now");
  EXPECT_EQ(s->get("never"), "now");
  EXPECT_EQ(s->add("x", 1), 1);
}

TEST_P(TcpStoreTest, MultiGetMultiSetAppend) {
  auto s = client();
  std::vector<std::string> keys{"a", "b", "c"}, values{"1", "22", ""};
  s->multi_set(keys, values);
  EXPECT_EQ(s->multi_get(keys), values);
  s->append("log", "ab");
  s->append("log", "cd");
  EXPECT_EQ(s->get("log"), "abcd");
}

TEST_P(TcpStoreTest, PrefixStoreNamespacesKeys) {
  auto s = client();
  PrefixStore p("/worker/attempt_0", *s);
  p.set("x", "1");
  EXPECT_EQ(s->get("/worker/attempt_0/x"), "1");
  EXPECT_EQ(p.get("x"), "1");
  PrefixStore nested("inner", p);
  nested.add("c", 2);
  EXPECT_EQ(s->get("/worker/attempt_0/inner/c"), "2");
}

TEST_P(TcpStoreTest, ConcurrentUseFromManyThreads) {
  auto s = client();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) s->add("shared", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(s->get("shared"), "1600");
}

TEST_P(TcpStoreTest, ReconnectsAfterTheConnectionIsLost) {
  auto s = client();
  s->set("k", "v");
  // A request the server rejects closes the connection; the next idempotent call reconnects.
  EXPECT_THROW(s->add("k", 1), StoreError);  // "v" is not a number
  EXPECT_EQ(s->get("k"), "v");
}

TEST_P(TcpStoreTest, ListKeysListsEveryKeySortedOrSaysItNeedsTheCurrentDialect) {
  auto s = client();
  s->set("b/2", "x");
  s->set("a/1", "y");
  s->add("c", 1);
  if (GetParam() == StoreDialect::kTorch113) {
    try {
      s->list_keys();
      FAIL() << "list_keys answered in the 1.13 dialect";
    } catch (const StoreError& e) {
      EXPECT_NE(std::string(e.what()).find("current dialect"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s->get("a/1"), "y");  // still usable
    return;
  }
  EXPECT_EQ(s->list_keys(), (std::vector<std::string>{"a/1", "b/2", "c"}));
  EXPECT_TRUE(s->delete_key("b/2"));
  EXPECT_EQ(s->list_keys(), (std::vector<std::string>{"a/1", "c"}));
}

INSTANTIATE_TEST_SUITE_P(BothDialects, TcpStoreTest,
                         ::testing::Values(StoreDialect::kCurrent, StoreDialect::kTorch113),
                         [](const auto& info) {
                           return info.param == StoreDialect::kCurrent ? "Current" : "Torch113";
                         });

#ifndef COHORT_TCP_STORE_TEST_VIA_RELAY  // the rest involves no relay: run once
TEST(TcpStoreConnect, RetriesUntilTheServerAppears) {
  // Reserve a free port, release it, start the server there only after the client began.
  int port;
  {
    rdzv::StoreServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    rdzv::StoreServerThread probe(o);
    port = probe.port();
  }
  std::unique_ptr<rdzv::StoreServerThread> server;
  auto connecting = std::async(std::launch::async, [&] {
    TcpStoreOptions o;
    o.port = port;
    o.connect_timeout = 10s;
    return std::make_unique<TcpStore>(o);
  });
  EXPECT_EQ(connecting.wait_for(150ms), std::future_status::timeout);
  rdzv::StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = static_cast<uint16_t>(port);
  server = std::make_unique<rdzv::StoreServerThread>(o);
  auto store = connecting.get();
  store->set("k", "v");
  EXPECT_EQ(store->get("k"), "v");
}

// A server of the current dialect that does not know LIST_KEYS: it answers the handshake
// (VALIDATE, then PING with its nonce) and closes the connection at the next request, as
// PyTorch's servers do with an opcode they do not know.
TEST(TcpStoreListKeys, AServerWithoutListKeysIsReportedClearly) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread fake([lfd] {
    int fd = ::accept(lfd, nullptr, nullptr);
    if (fd < 0) return;
    unsigned char in[10];  // VALIDATE (opcode, u32 magic), PING (opcode, u32 nonce)
    size_t got = 0;
    while (got < sizeof in) {
      ssize_t n = ::read(fd, in + got, sizeof in - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got == sizeof in) {
      (void)!::write(fd, in + 6, 4);  // the PING's nonce back
      char op;
      (void)!::read(fd, &op, 1);  // LIST_KEYS: unknown here
    }
    ::close(fd);
  });
  TcpStoreOptions o;
  o.port = ntohs(addr.sin_port);
  o.connect_timeout = 5s;
  o.timeout = 5s;
  auto start = std::chrono::steady_clock::now();
  try {
    TcpStore s(o);
    s.list_keys();
    FAIL() << "list_keys answered";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot list its keys"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);
  fake.join();
  ::close(lfd);
}

TEST(TcpStoreConnect, GivesUpAtTheDeadlineNamingTheAddress) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = 1;  // nothing listens on port 1
  o.connect_timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  try {
    TcpStore s(o);
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

#endif  // COHORT_TCP_STORE_TEST_VIA_RELAY

}  // namespace
}  // namespace cohort

#ifndef COHORT_TCP_STORE_TEST_VIA_RELAY
namespace cohort {
namespace {

TEST(TcpStoreRefusal, ARequestTheStoreRefusesFailsSayingSo) {
  // cohortd refuses a write past --max-memory by closing the connection (TCPStore has no error
  // reply): a retried write is closed again right after reconnecting, and the error says what
  // that means instead of only "connection lost".
  rdzv::StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.max_memory = 100;
  rdzv::StoreServerThread server(o);
  TcpStoreOptions c;
  c.port = server.port();
  c.timeout = 5s;
  c.tagged_writes = true;  // a tagged write is retried once, as cohortrun's are
  TcpStore s(c);
  s.set("a", std::string(60, 'x'));
  try {
    s.compare_set("b", "", std::string(50, 'y'));  // 51 bytes more: past 100
    FAIL() << "a write past --max-memory was taken";
  } catch (const StoreError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("lost again right after reconnecting"), std::string::npos) << what;
    EXPECT_NE(what.find("--max-memory"), std::string::npos) << what;
  }
  EXPECT_EQ(s.get("a"), std::string(60, 'x'));  // reads go on
}

TEST(TcpStoreInterrupt, WakesABlockedWaitAndTheStoreStaysUsable) {
  rdzv::StoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  rdzv::StoreServerThread server(so);
  TcpStoreOptions o;
  o.port = server.port();
  TcpStore s(o);
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<std::string> keys{"never"};
    s.wait(keys, std::chrono::hours(1));
  });
  while (server.stats().parked_waits == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.interrupt();
  EXPECT_THROW(waiting.get(), StoreError);
  s.set("k", "v");
  EXPECT_EQ(s.get("k"), "v");
}

}  // namespace
}  // namespace cohort
#endif
