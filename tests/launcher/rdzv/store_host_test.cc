// The store an agent hosts (a real cohortd server thread on 127.0.0.1) with the job's token and
// unauthenticated networks, and the address rules around it: where to listen for a given
// endpoint, where a local client dials, and when an address is unreachable outright.
#include "rdzv/store_host.h"

#include <gtest/gtest.h>

#include <chrono>

#include "cohort/error.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

TcpStoreOptions client_of(const rdzv::StoreServerThread& server, std::string token = "") {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = server.port();
  o.timeout = 2s;
  o.connect_timeout = 2s;
  o.auth_token = std::move(token);
  return o;
}

TEST(HostStore, ServesOnAFreePortWhenAskedForPortZero) {
  auto server = host_store("127.0.0.1", 0, {});
  ASSERT_NE(server->port(), 0);
  TcpStore client(client_of(*server));
  client.set("k", "v");
  EXPECT_EQ(client.get("k"), "v");
}

TEST(HostStore, WithATokenOnlyClientsThatKnowItAreServed) {
  auto server = host_store("127.0.0.1", 0, {"job-token-0123456789", ""});
  TcpStore member(client_of(*server, "job-token-0123456789"));
  member.set("k", "v");
  EXPECT_EQ(member.get("k"), "v");
  EXPECT_ANY_THROW({
    TcpStore stranger(client_of(*server));
    stranger.get("k");
  });
  EXPECT_ANY_THROW({
    TcpStore wrong(client_of(*server, "another-token-9876543210"));
    wrong.get("k");
  });
}

TEST(HostStore, AnUnauthenticatedNetworkIsServedWithoutTheToken) {
  auto server = host_store("127.0.0.1", 0, {"job-token-0123456789", "127.0.0.0/8"});
  TcpStore plain(client_of(*server));  // as PyTorch's own clients, which cannot authenticate
  plain.set("k", "v");
  EXPECT_EQ(plain.get("k"), "v");
}

TEST(HostStore, APortInUseIsAnErrorNamingTheAddress) {
  auto first = host_store("127.0.0.1", 0, {});
  const std::string port = std::to_string(first->port());
  try {
    host_store("127.0.0.1", first->port(), {});
    FAIL() << "a second store bound the same port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(port), std::string::npos) << e.what();
  }
}

TEST(ListenAddressFor, ALoopbackEndpointListensThereOnlyAnyOtherOnEveryInterface) {
  EXPECT_EQ(listen_address_for("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(listen_address_for("127.0.0.5"), "127.0.0.5");
  EXPECT_EQ(listen_address_for("localhost"), "127.0.0.1");
  EXPECT_EQ(listen_address_for("::1"), "::1");
  EXPECT_EQ(listen_address_for("[::1]"), "::1");
  EXPECT_EQ(listen_address_for("10.1.2.3"), "0.0.0.0");
  EXPECT_EQ(listen_address_for("node7.cluster"), "0.0.0.0");
  EXPECT_EQ(listen_address_for("fd00::7"), "::");
  EXPECT_EQ(listen_address_for("[fd00::7]"), "::");
}

TEST(LocalDialAddress, AWildcardListenerIsDialledOnLoopbackOfItsFamily) {
  EXPECT_EQ(local_dial_address("0.0.0.0"), "127.0.0.1");
  EXPECT_EQ(local_dial_address("::"), "::1");
  EXPECT_EQ(local_dial_address("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(local_dial_address("10.1.2.3"), "10.1.2.3");
}

TEST(CheckReachable, AListeningStoreAndAClosedPortAreNotErrors) {
  auto server = host_store("127.0.0.1", 0, {});
  EXPECT_NO_THROW(check_reachable("127.0.0.1", server->port(), "--master-addr"));
  const int closed = server->port();
  server.reset();
  // Not listening yet: the store may still be starting; the connection retries.
  EXPECT_NO_THROW(check_reachable("127.0.0.1", closed, "--master-addr"));
}

TEST(CheckReachable, ANameThatDoesNotResolveFailsAtOnceNamingTheAddressAndTheFlag) {
  const auto start = std::chrono::steady_clock::now();
  try {
    check_reachable("no-such-host.invalid", 29500, "--rdzv-endpoint");
    FAIL() << "an unresolvable name passed";
  } catch (const StoreError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no-such-host.invalid:29500"), std::string::npos) << what;
    EXPECT_NE(what.find("--rdzv-endpoint"), std::string::npos) << what;
    EXPECT_EQ(e.address(), "no-such-host.invalid:29500");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s) << "it waited for the probe's timeout";
}

}  // namespace
}  // namespace cohort::launch
