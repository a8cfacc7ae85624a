// RoundRelays: a relay per round to that round's store, on a port claimed job-wide, closed with
// the earlier rounds; a store that takes no relay links leaves the workers on the store.
#include "rdzv/round_relays.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <thread>

#include "cohort/rdzv/server.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

rdzv::StoreServerOptions round_store() {
  rdzv::StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  return o;
}

std::unique_ptr<TcpStore> dial(const HostPort& where) {
  TcpStoreOptions o;
  o.host = where.host;
  o.port = where.port;
  o.timeout = 5s;
  o.connect_timeout = 1s;
  return std::make_unique<TcpStore>(o);
}

const RoundRelays::Claim kAnyPort = [](int) { return true; };

TEST(RoundRelays, ARoundsWorkersReachItsStoreThroughOneLink) {
  rdzv::StoreServerThread store(round_store());
  RoundRelays relays;
  auto opened = relays.open(0, {"127.0.0.1", store.port()}, kAnyPort);
  ASSERT_TRUE(opened.relay) << opened.why_not;
  EXPECT_NE(opened.relay->port, store.port());
  auto a = dial(*opened.relay);
  auto b = dial(*opened.relay);
  a->set("k", "v");
  EXPECT_EQ(b->get("k"), "v");
  EXPECT_EQ(store.stats().connections, 1u);
  EXPECT_EQ(store.stats().channels, 2u);
  // Opening the round again is the same relay.
  EXPECT_EQ(relays.open(0, {"127.0.0.1", store.port()}, kAnyPort).relay->port, opened.relay->port);
  EXPECT_EQ(relays.relay_of(0)->port, opened.relay->port);
  EXPECT_FALSE(relays.relay_of(1));
}

TEST(RoundRelays, APortAnEarlierRoundUsedIsNeverTaken) {
  rdzv::StoreServerThread store(round_store());
  RoundRelays relays;
  std::vector<int> offered;
  auto opened = relays.open(0, {"127.0.0.1", store.port()}, [&](int port) {
    offered.push_back(port);
    return offered.size() > 3;  // the first three "served earlier rounds"
  });
  ASSERT_TRUE(opened.relay) << opened.why_not;
  ASSERT_EQ(offered.size(), 4u);
  EXPECT_EQ(opened.relay->port, offered.back());
  // Refused ports stayed bound while the search went on: none was offered twice.
  EXPECT_EQ(std::set<int>(offered.begin(), offered.end()).size(), 4u);
}

TEST(RoundRelays, ClosingEarlierRoundsCutsTheirWorkersAndKeepsTheNewRound) {
  rdzv::StoreServerThread store0(round_store()), store1(round_store());
  RoundRelays relays;
  auto r0 = relays.open(0, {"127.0.0.1", store0.port()}, kAnyPort);
  auto r1 = relays.open(1, {"127.0.0.1", store1.port()}, kAnyPort);
  ASSERT_TRUE(r0.relay && r1.relay);
  auto old_worker = dial(*r0.relay);
  auto new_worker = dial(*r1.relay);
  old_worker->set("round", "0");
  new_worker->set("round", "1");
  relays.close_before(1);
  EXPECT_EQ(relays.open_rounds(), std::vector<int>{1});
  // The old round's worker reaches nothing (its relay's port is closed), never round 1's store.
  EXPECT_THROW(old_worker->get("round"), StoreError);
  EXPECT_EQ(new_worker->get("round"), "1");
  EXPECT_TRUE(store0.stats().links == 0 || store0.stats().channels == 0);
}

TEST(RoundRelays, AStoreThatTakesNoRelayLinksLeavesTheWorkersOnTheStore) {
  // A listener that closes every connection at once, as a server that does not know the hello.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread closer([fd] {
    int c = ::accept(fd, nullptr, nullptr);
    if (c >= 0) ::close(c);
  });
  RoundRelays relays;
  auto opened = relays.open(0, {"127.0.0.1", ntohs(a.sin_port)}, kAnyPort);
  EXPECT_FALSE(opened.relay);
  EXPECT_NE(opened.why_not.find("not a cohortd that takes relay links"), std::string::npos)
      << opened.why_not;
  EXPECT_TRUE(relays.open_rounds().empty());
  closer.join();
  ::close(fd);
}

}  // namespace
}  // namespace cohort::launch
