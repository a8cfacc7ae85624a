// A node's store relay (cohort/rdzv/relay.h) between TcpStore clients and an in-process cohortd:
// shared waits, the token handshake end to end, limits per channel, backpressure, a lost link,
// and stores that cannot take relay links.
#include "cohort/rdzv/relay.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "../../common/subprocess.h"
#include "../raw_client.h"
#include "cohort/rdzv/codec.h"
#include "cohort/rdzv/server.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort::rdzv {
namespace {

using namespace std::chrono_literals;
using testing::RawClient;

StoreServerOptions local_server() {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  return o;
}

StoreRelayOptions relay_to(int port) {
  StoreRelayOptions o;
  o.store_host = "127.0.0.1";
  o.store_port = port;
  o.connect_timeout = 5s;
  return o;
}

std::unique_ptr<TcpStore> client(int port, std::chrono::milliseconds timeout = 5s,
                                 std::string token = {},
                                 std::chrono::milliseconds connect_timeout = 5s) {
  TcpStoreOptions o;
  o.port = port;
  o.timeout = timeout;
  o.connect_timeout = connect_timeout;
  o.auth_token = std::move(token);
  return std::make_unique<TcpStore>(o);
}

// Polls `pred` until it holds or `limit` passes.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

TEST(StoreRelay, CarriesEveryClientOverOneLink) {
  StoreServerThread server(local_server());
  StoreRelayThread relay(relay_to(server.port()));
  auto a = client(relay.port());
  auto b = client(relay.port());
  a->set("k", "v");
  EXPECT_EQ(b->get("k"), "v");
  EXPECT_EQ(b->add("n", 3), 3);
  const StoreServerStats s = server.stats();
  EXPECT_EQ(s.connections, 1u);  // the link
  EXPECT_EQ(s.links, 1u);
  EXPECT_EQ(s.channels, 2u);
  EXPECT_EQ(relay.stats().clients, 2u);
}

TEST(StoreRelay, IdenticalWaitsOfTheNodeShareOneParkedWait) {
  StoreServerThread server(local_server());
  StoreRelayThread relay(relay_to(server.port()));
  constexpr int kWaiters = 6;
  std::vector<std::future<void>> waits;
  for (int i = 0; i < kWaiters; ++i) {
    waits.push_back(std::async(std::launch::async, [&] {
      auto c = client(relay.port());
      c->wait(std::vector<std::string>{"go"});
    }));
  }
  ASSERT_TRUE(eventually([&] {
    auto s = server.stats();
    return s.parked_waits == 1 && s.sharing_waits == kWaiters;
  })) << "parked "
      << server.stats().parked_waits << ", sharing " << server.stats().sharing_waits;
  client(server.port())->set("go", "1");  // a direct client's write wakes them all
  for (auto& w : waits) EXPECT_EQ(w.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(server.stats().parked_waits, 0u);
}

TEST(StoreRelay, AWaiterDirectIsWokenByAWriterBehindTheRelay) {
  StoreServerThread server(local_server());
  StoreRelayThread relay(relay_to(server.port()));
  auto direct = client(server.port());
  auto got = std::async(std::launch::async, [&] { return direct->get("late"); });
  EXPECT_EQ(got.wait_for(100ms), std::future_status::timeout);
  client(relay.port())->set("late", "here");
  EXPECT_EQ(got.get(), "here");
}

TEST(StoreRelay, ATimedOutWaitIsCancelledAndTheConnectionStaysUsable) {
  StoreServerThread server(local_server());
  StoreRelayThread relay(relay_to(server.port()));
  auto c = client(relay.port(), 200ms);
  EXPECT_THROW(c->wait(std::vector<std::string>{"never"}), StoreTimeoutError);
  c->set("after", "1");
  EXPECT_EQ(c->get("after"), "1");
  EXPECT_TRUE(eventually([&] { return server.stats().parked_waits == 0; }));
}

TEST(StoreRelay, TheTokenHandshakeRunsEndToEnd) {
  StoreServerOptions o = local_server();
  o.auth_token = "s3cret-token-of-16+";
  StoreServerThread server(o);
  StoreRelayThread relay(relay_to(server.port()));  // the relay itself holds no token
  auto ok = client(relay.port(), 5s, o.auth_token);
  ok->set("k", "v");
  EXPECT_EQ(ok->get("k"), "v");
  EXPECT_THROW(client(relay.port(), 5s, "a-wrong-token-of-16+")->get("k"), StoreError);
  EXPECT_THROW(client(relay.port(), 5s)->add("x", 1), StoreError);
  // (Our client refuses a server that cannot prove the token, before it proves its own.)
  EXPECT_GE(server.stats().refused_unauthenticated, 1u);
}

TEST(StoreRelay, UnauthenticatedNetworksApplyToTheLinksAddress) {
  StoreServerOptions o = local_server();
  o.auth_token = "s3cret-token-of-16+";
  o.allow_unauthenticated.push_back(auth::Cidr::parse("127.0.0.0/8"));
  StoreServerThread server(o);
  StoreRelayThread relay(relay_to(server.port()));
  auto plain = client(relay.port());
  plain->set("k", "v");
  EXPECT_EQ(plain->get("k"), "v");
}

TEST(StoreRelay, AChannelPastALimitIsClosedAloneAndTheOthersCarryOn) {
  StoreServerOptions o = local_server();
  o.limits.max_value_bytes = 1024;
  StoreServerThread server(o);
  StoreRelayThread relay(relay_to(server.port()));
  auto good = client(relay.port());
  good->set("before", "1");
  RawClient bad(relay.port(), relay.host().c_str());
  std::string set;
  put_u8(&set, 0);  // legacy SET
  put_bytes(&set, "big");
  put_bytes(&set, std::string(2048, 'x'));
  bad.send(set);
  EXPECT_TRUE(bad.closed_by_peer());
  good->set("after", "1");
  EXPECT_EQ(good->get("before"), "1");
  EXPECT_EQ(server.stats().links, 1u);
  EXPECT_GE(server.stats().closed_for_limit, 1u);
}

TEST(StoreRelay, ALegacyGetOfAMissingKeyClosesThatWorkerOnly) {
  StoreServerThread server(local_server());
  StoreRelayThread relay(relay_to(server.port()));
  RawClient legacy(relay.port(), relay.host().c_str());
  std::string get;
  put_u8(&get, 2);  // legacy GET: PyTorch 1.13's server drops the connection on a missing key
  put_bytes(&get, "missing");
  legacy.send(get);
  EXPECT_TRUE(legacy.closed_by_peer());
  EXPECT_EQ(client(relay.port())->add("n", 1), 1);
}

TEST(StoreRelay, ChannelsCountAgainstTheConnectionsPerAddress) {
  StoreServerOptions o = local_server();
  o.max_connections_per_address = 3;  // the link and two channels
  StoreServerThread server(o);
  StoreRelayThread relay(relay_to(server.port()));
  auto a = client(relay.port());
  auto b = client(relay.port());
  a->set("k", "1");
  b->set("k", "2");
  RawClient third(relay.port(), relay.host().c_str());
  EXPECT_TRUE(third.closed_by_peer());
  EXPECT_EQ(a->get("k"), "2");
}

TEST(StoreRelay, AWorkerThatDoesNotReadIsHeldNotBuffered) {
  StoreServerOptions o = local_server();
  o.max_unsent_bytes = 1 << 20;
  StoreServerThread server(o);
  StoreRelayThread relay(relay_to(server.port()));
  const std::string value(256 * 1024, 'v');
  auto writer = client(relay.port());
  writer->set("big", value);
  ASSERT_EQ(writer->get("big").size(), value.size());  // the SET has run
  // 64 pipelined GETs of 256 KiB (16 MiB of replies) that nobody reads for a while.
  RawClient reader(relay.port(), relay.host().c_str());
  std::string gets;
  for (int i = 0; i < 64; ++i) {
    put_u8(&gets, 2);
    put_bytes(&gets, "big");
  }
  reader.send(gets);
  std::this_thread::sleep_for(300ms);  // let whatever would pile up pile up
  // Held at the bound: the store has not run most GETs, the relay buffers about the bound.
  EXPECT_LT(server.stats().connection_bytes, 8u << 20);
  // Everything arrives once it reads.
  for (int i = 0; i < 64; ++i) {
    auto reply = reader.read(8 + value.size(), 10s);
    ASSERT_TRUE(reply.has_value()) << "reply " << i;
    ASSERT_EQ(reply->substr(8), value) << "reply " << i;
  }
  client(relay.port())->set("still", "fine");
}

TEST(StoreRelay, LosingTheLinkFailsItsWorkersPromptly) {
  auto server = std::make_unique<StoreServerThread>(local_server());
  StoreRelayThread relay(relay_to(server->port()));
  std::promise<std::string> lost;
  relay.on_link_lost([&](const std::string& why) { lost.set_value(why); });
  // As against a store that goes away: the wait fails, its retry finds nothing listening until
  // the connect deadline.
  auto c = client(relay.port(), 60s, {}, 500ms);
  auto waited = std::async(std::launch::async, [&] {
    try {
      c->wait(std::vector<std::string>{"never"});
      return std::string("returned");
    } catch (const StoreError& e) {
      return std::string("StoreError");
    }
  });
  ASSERT_EQ(waited.wait_for(100ms), std::future_status::timeout);
  server.reset();  // the store goes away
  ASSERT_EQ(waited.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(waited.get(), "StoreError");
  auto why = lost.get_future();
  ASSERT_EQ(why.wait_for(5s), std::future_status::ready);
  EXPECT_NE(why.get().find("closed the relay link"), std::string::npos);
  EXPECT_FALSE(relay.stats().link_up);
  EXPECT_THROW(RawClient(relay.port(), relay.host().c_str()), std::runtime_error);  // no listener
}

// A listener that does something other than cohortd with what it is sent.
class FakeStore {
 public:
  explicit FakeStore(bool close_at_once) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd_, 8);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, close_at_once] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      if (!close_at_once) {
        char buf[64];
        while (::read(c, buf, sizeof(buf)) > 0) {
        }
      }
      ::close(c);
    });
  }
  ~FakeStore() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(StoreRelay, AStoreThatClosesAtTheHelloIsNotACohortd) {
  FakeStore fake(/*close_at_once=*/true);
  try {
    StoreRelayThread relay(relay_to(fake.port()));
    FAIL() << "relayed to a store that closed at the hello";
  } catch (const RelayUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("not a cohortd that takes relay links"), std::string::npos)
        << e.what();
  }
}

TEST(StoreRelay, AStoreThatNeverAnswersTheHelloIsGivenUpAtTheDeadline) {
  FakeStore fake(/*close_at_once=*/false);  // PyTorch's libuv server keeps an unknown command
  StoreRelayOptions o = relay_to(fake.port());
  o.connect_timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(StoreRelayThread relay(o), RelayUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(StoreRelay, NothingListeningIsReportedNamingTheStore) {
  int port;
  {
    StoreServerThread gone(local_server());
    port = gone.port();
  }
  StoreRelayOptions o = relay_to(port);
  o.connect_timeout = 300ms;
  try {
    StoreRelayThread relay(o);
    FAIL();
  } catch (const RelayUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
}

// Out of descriptors, the relay (cohortrun's, in its own process here: relay_host under prlimit)
// retries accepting every 50 ms, a log line a second at most: it retried at once, spinning, and
// logged each failure (670,571 lines, 58 MB, in 3.7 s).
TEST(StoreRelay, OutOfDescriptorsItRetriesEvery50msSayingSoALineASecond) {
  StoreServerThread server(local_server());
  testing::Subprocess relay(
      {"prlimit", "--nofile=32", RELAY_HOST_BIN, "127.0.0.1", std::to_string(server.port())});
  auto address = relay.read_line(10s);
  ASSERT_TRUE(address);
  const int port = std::stoi(address->substr(address->rfind(':') + 1));
  std::vector<RawClient> workers;
  for (int i = 0; i < 60; ++i) workers.emplace_back(port);  // past its 32 descriptors
  std::string log;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (log.find("since the failures began") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    log += relay.read_some_stderr(200ms);
  ASSERT_NE(log.find("since the failures began"), std::string::npos) << log.substr(0, 4000);
  size_t lines = 0;
  for (size_t at = log.find("accept failed"); at != std::string::npos;
       at = log.find("accept failed", at + 1))
    ++lines;
  EXPECT_LE(lines, 3u) << log.substr(0, 4000);  // a third only if this thread lagged a second
  // Descriptors freed: a worker is served through it again.
  workers.clear();
  EXPECT_TRUE(eventually(
      [&] {
        try {
          auto c = client(port, 2s, {}, 2s);
          c->set("k", "v");
          return c->get("k") == "v";
        } catch (const std::exception&) {
          return false;
        }
      },
      10s));
}

}  // namespace
}  // namespace cohort::rdzv
