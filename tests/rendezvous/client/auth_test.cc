// cohortd's token handshake: our clients in, everyone else out, except listed networks.
#include "cohort/rdzv/auth.h"
#include "cohort/error.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <thread>

#include "../hex.h"
#include "../raw_client.h"
#include "cohort/rdzv/cohortd.h"
#include "cohort/rdzv/server.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;
using testing::RawClient;
using testing::unhex;

TEST(Auth, ProofsVerifyOnlyWithTheSameTokenAndChallenge) {
  std::string c = auth::make_challenge();
  ASSERT_EQ(c.size(), auth::kChallengeBytes);
  EXPECT_NE(c, auth::make_challenge());
  std::string p = auth::prove("secret", c);
  EXPECT_EQ(p.size(), auth::kProofBytes);
  EXPECT_TRUE(auth::verify("secret", c, p));
  EXPECT_FALSE(auth::verify("Secret", c, p));
  EXPECT_FALSE(auth::verify("secret", auth::make_challenge(), p));
  EXPECT_FALSE(auth::verify("secret", c, p.substr(1)));
}

TEST(Auth, Networks) {
  auto lo = auth::Cidr::parse("127.0.0.0/8");
  EXPECT_TRUE(lo.contains("127.0.0.1"));
  EXPECT_TRUE(lo.contains("::ffff:127.1.2.3"));  // IPv4-mapped, as a dual-stack socket reports it
  EXPECT_FALSE(lo.contains("10.0.0.1"));
  EXPECT_FALSE(lo.contains("::1"));
  EXPECT_TRUE(auth::Cidr::parse("10.78.0.2").contains("10.78.0.2"));
  EXPECT_FALSE(auth::Cidr::parse("10.78.0.2").contains("10.78.0.3"));
  EXPECT_TRUE(auth::Cidr::parse("fd00::/8").contains("fd12::1"));
  EXPECT_TRUE(auth::Cidr::parse("0.0.0.0/0").contains("1.2.3.4"));
  EXPECT_THROW(auth::Cidr::parse("10.0.0.0/33"), UsageError);
  EXPECT_THROW(auth::Cidr::parse("nonsense/8"), UsageError);
  EXPECT_EQ(auth::parse_cidrs("127.0.0.1,10.0.0.0/8").size(), 2u);
}

rdzv::StoreServerOptions with_token(std::vector<std::string> allow = {}) {
  rdzv::StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.auth_token = "s3cret-token";
  for (const auto& a : allow) o.allow_unauthenticated.push_back(auth::Cidr::parse(a));
  return o;
}

TcpStoreOptions client(int port, std::string token) {
  TcpStoreOptions o;
  o.port = port;
  o.auth_token = std::move(token);
  o.connect_timeout = 2s;
  o.timeout = 2s;
  return o;
}

TEST(Auth, ClientsWithTheTokenGetIn) {
  rdzv::StoreServerThread server(with_token());
  TcpStore s(client(server.port(), "s3cret-token"));
  s.set("k", "v");
  EXPECT_EQ(s.get("k"), "v");
  TcpStoreOptions legacy = client(server.port(), "s3cret-token");
  legacy.dialect = StoreDialect::kTorch113;
  TcpStore l(legacy);
  EXPECT_EQ(l.get("k"), "v");
}

TEST(Auth, AWrongTokenGetsNothing) {
  rdzv::StoreServerThread server(with_token());
  try {
    TcpStore s(client(server.port(), "guess"));
    FAIL() << "connected with a wrong token";
  } catch (const StoreError& e) {
    // The server's proof does not check out with our token: we stop before proving ours.
    EXPECT_NE(std::string(e.what()).find("could not prove that it knows the store token"),
              std::string::npos)
        << e.what();
  }
  // The one-way handshake (libcohort before the mutual one) with a wrong proof: refused.
  RawClient old_client(server.port());
  old_client.send(unhex("41"));
  auto challenge = old_client.read(auth::kChallengeBytes);
  ASSERT_TRUE(challenge);
  old_client.send(unhex("42") + auth::prove("guess", *challenge));
  EXPECT_TRUE(old_client.closed_by_peer());
  EXPECT_EQ(server.stats().refused_unauthenticated, 1u);
}

TEST(Auth, TheOneWayHandshakeStillWorks) {
  rdzv::StoreServerThread server(with_token());
  RawClient old_client(server.port());
  old_client.send(unhex("41"));
  auto challenge = old_client.read(auth::kChallengeBytes);
  ASSERT_TRUE(challenge);
  old_client.send(unhex("42") + auth::prove("s3cret-token", *challenge));
  EXPECT_EQ(old_client.read(1), unhex("01"));
  old_client.send(unhex("06"));  // GETNUMKEYS, 1.13 dialect
  EXPECT_TRUE(old_client.read(8));
}

TEST(Auth, TheServerProvesTheTokenFirst) {
  rdzv::StoreServerThread server(with_token());
  RawClient c(server.port());
  const std::string nonce(auth::kNonceBytes, 'n');
  c.send(unhex("43") + nonce);
  auto challenge = c.read(auth::kChallengeBytes), proof = c.read(auth::kProofBytes);
  ASSERT_TRUE(challenge && proof);
  EXPECT_EQ(*proof, auth::prove_mutual("s3cret-token", "server", nonce, *challenge));
  // A proof for another nonce, or the server's own proof reflected back, is no client proof.
  EXPECT_NE(*proof, auth::prove_mutual("s3cret-token", "server", std::string(32, 'm'), *challenge));
  c.send(unhex("42") + *proof);
  EXPECT_TRUE(c.closed_by_peer());
  RawClient good(server.port());
  good.send(unhex("43") + nonce);
  challenge = good.read(auth::kChallengeBytes);
  ASSERT_TRUE(challenge && good.read(auth::kProofBytes));
  good.send(unhex("42") + auth::prove_mutual("s3cret-token", "client", nonce, *challenge));
  EXPECT_EQ(good.read(1), unhex("01"));
}

// A server that does not know the token (one impersonating cohortd at its address) answers the
// mutual hello with a challenge and a proof it cannot make: the client refuses it with a clear
// error, and sends it nothing more (no proof to replay elsewhere, no request, no value).
TEST(Auth, AClientRefusesAServerThatCannotProveTheToken) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::string hello, after;
  std::thread fake([&] {
    int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) return;
    char buf[256];
    while (hello.size() < 1 + auth::kNonceBytes) {
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      hello.append(buf, static_cast<size_t>(n));
    }
    std::string answer(auth::kChallengeBytes, 'c');
    answer += auth::prove_mutual("not-the-token-at-all", "server", hello.substr(1), answer);
    ::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
    for (;;) {  // whatever the client sends before it closes
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      after.append(buf, static_cast<size_t>(n));
    }
    ::close(c);
  });
  TcpStoreOptions o = client(ntohs(a.sin_port), "s3cret-token");
  o.connect_timeout = 10s;
  const auto start = std::chrono::steady_clock::now();
  try {
    TcpStore s(o);
    FAIL() << "connected to a server that does not know the token";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove that it knows the store token"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // refused, not retried till timeout
  fake.join();
  ::close(listener);
  ASSERT_EQ(hello.size(), 1 + auth::kNonceBytes);
  EXPECT_EQ(static_cast<uint8_t>(hello[0]), auth::kHelloMutual);
  EXPECT_EQ(after, "");
}

TEST(Auth, ClientsWithoutTheTokenAreClosedBeforeAnyRequest) {
  rdzv::StoreServerThread server(with_token());
  {
    TcpStore owner(client(server.port(), "s3cret-token"));
    owner.set("/secret", "x");
  }
  RawClient pytorch_like(server.port());
  pytorch_like.send(unhex("02 0700000000000000 2f736563726574"));  // GET /secret, 1.13 dialect
  EXPECT_TRUE(pytorch_like.closed_by_peer());
  // PyTorch 2.x retries a connection whose VALIDATE or PING fails for its whole timeout (30 min
  // by default), so those two are answered; its first real request is refused.
  RawClient newer(server.port());
  newer.send(unhex("00 cef7853c 0d 01000000"));  // VALIDATE + PING
  ASSERT_EQ(newer.read(4), unhex("01000000"));
  newer.send(unhex("03 0700000000000000 2f736563726574"));  // GET /secret, 2.x dialect
  EXPECT_TRUE(newer.closed_by_peer());
  RawClient bad_proof(server.port());
  bad_proof.send(unhex("41"));
  ASSERT_TRUE(bad_proof.read(auth::kChallengeBytes));
  bad_proof.send(unhex("42") + std::string(auth::kProofBytes, 'x'));
  EXPECT_TRUE(bad_proof.closed_by_peer());
  EXPECT_EQ(server.stats().refused_unauthenticated, 3u);
}

TEST(Auth, ListedNetworksMaySkipTheToken) {
  rdzv::StoreServerThread server(with_token({"127.0.0.0/8"}));
  RawClient pytorch_like(server.port());
  pytorch_like.send(unhex("06"));  // GETNUMKEYS
  EXPECT_TRUE(pytorch_like.read(8));
  TcpStore ours(client(server.port(), "s3cret-token"));  // and the handshake still works
  ours.set("a", "b");
  EXPECT_EQ(ours.get("a"), "b");
}

// A server without a token cannot prove one: a client with a token refuses it (it could be
// anyone's), while clients without one use it as before.
TEST(Auth, AClientWithATokenRefusesAServerWithoutOne) {
  rdzv::StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  rdzv::StoreServerThread server(o);
  try {
    TcpStore s(client(server.port(), "whatever-token-16"));
    FAIL() << "a token holder used a server without the token";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove that it knows the store token"),
              std::string::npos)
        << e.what();
  }
  TcpStore s(client(server.port(), ""));
  s.set("k", "v");
  EXPECT_EQ(s.get("k"), "v");
}

TEST(Auth, TokenFiles) {
  std::string path = "/tmp/cohort_token_test_" + std::to_string(::getpid());
  std::ofstream(path) << "  tok-123\n";
  EXPECT_EQ(auth::read_token_file(path), "tok-123");
  std::ofstream(path) << "\n \n";
  EXPECT_THROW(auth::read_token_file(path), std::runtime_error);
  ::unlink(path.c_str());
  EXPECT_THROW(auth::read_token_file(path), std::runtime_error);
}

// Reads `path` as a token file on a thread of its own; the error's text, "" when it was read,
// "hung" when it did not return within 5 s (a FIFO with no writer, before the reader opened
// files without blocking: the writer this test then opens releases it).
std::string token_file_error(const std::string& path) {
  auto result = std::async(std::launch::async, [path]() -> std::string {
    try {
      auth::read_token_file(path);
      return "";
    } catch (const UsageError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("not a UsageError: ") + e.what();
    }
  });
  if (result.wait_for(5s) == std::future_status::ready) return result.get();
  int unblock = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
  result.wait();
  if (unblock >= 0) ::close(unblock);
  return "hung";
}

TEST(Auth, TokenFilesAreReadOnlyWhenRegularAndSmall) {
  const std::string dir = "/tmp/cohort_token_kinds_" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  const std::string fifo = dir + "/fifo", big = dir + "/big", good = dir + "/token",
                    link = dir + "/link", zero_link = dir + "/zero";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  {
    std::ofstream(big).close();
    ASSERT_EQ(::truncate(big.c_str(), 200 << 20), 0);  // sparse: no disk spent
    std::ofstream(good) << "0123456789abcdef0123\n";
  }
  // A Kubernetes secret is a link (token -> ..data/token): followed, and read.
  ASSERT_EQ(::symlink(good.c_str(), link.c_str()), 0);
  ASSERT_EQ(::symlink("/dev/zero", zero_link.c_str()), 0);

  std::string e = token_file_error(fifo);
  EXPECT_NE(e.find(fifo + " is a FIFO, not a regular file"), std::string::npos) << e;
  for (const std::string& zero : {std::string("/dev/zero"), zero_link}) {
    e = token_file_error(zero);
    EXPECT_NE(e.find(zero + " is a character device, not a regular file"), std::string::npos) << e;
  }
  e = token_file_error(big);
  EXPECT_NE(e.find(big + " is 209715200 bytes; at most 65536 are read"), std::string::npos) << e;
  e = token_file_error(dir);
  EXPECT_NE(e.find(dir + " is a directory"), std::string::npos) << e;
  EXPECT_EQ(auth::read_token_file(link), "0123456789abcdef0123");

  for (const auto& f : {fifo, big, good, link, zero_link}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

TEST(Auth, ShortTokensAreRefusedAndReadableFilesWarned) {
  std::string path = "/tmp/cohort_token_check_" + std::to_string(::getpid());
  std::ofstream(path) << "abc\n";
  ::chmod(path.c_str(), 0600);
  try {
    auth::check_token_file(path, auth::read_token_file(path));
    ADD_FAILURE() << "a 3-byte token was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at least 16"), std::string::npos) << e.what();
  }
  // cohortd refuses to start on it, with a usage error.
  std::string flag = "--auth-token-file", arg0 = "cohortd";
  char* argv[] = {arg0.data(), flag.data(), path.data(), nullptr};
  rdzv::CohortdConfig config;
  EXPECT_EQ(rdzv::parse_cohortd_args(3, argv, &config), 2);

  std::ofstream(path) << "0123456789abcdef0123\n";
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(auth::check_token_file(path, auth::read_token_file(path)), "");
  ::chmod(path.c_str(), 0644);
  std::string warning = auth::check_token_file(path, auth::read_token_file(path));
  EXPECT_NE(warning.find("0644"), std::string::npos) << warning;
  EXPECT_NE(warning.find("chmod 600 " + path), std::string::npos) << warning;
  EXPECT_EQ(rdzv::parse_cohortd_args(3, argv, &config), -1);
  EXPECT_EQ(config.server.auth_token, "0123456789abcdef0123");
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace cohort
