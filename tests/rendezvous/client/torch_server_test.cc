// Our client against PyTorch 1.13's own TCPStore server (a real Python process), and what that
// server does to everybody when one client sends half a request.
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "../../common/subprocess.h"
#include "../hex.h"
#include "../raw_client.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;
using cohort::testing::RawClient;
using cohort::testing::Subprocess;
using cohort::testing::unhex;

// A PyTorch TCPStore server on a free port; serves until its stdin closes.
class TorchStoreServer {
 public:
  TorchStoreServer()
      : proc_({COHORT_TORCH_PYTHON, "-c",
               "import datetime, sys, torch.distributed as d\n"
               "s = d.TCPStore('127.0.0.1', 0, None, True, datetime.timedelta(seconds=60))\n"
               "print(s.port, flush=True)\n"
               "sys.stdin.read()\n"}) {
    auto line = proc_.read_line(60s);
    if (!line) throw std::runtime_error("PyTorch TCPStore server did not start");
    port_ = std::stoi(*line);
  }
  int port() const { return port_; }

 private:
  Subprocess proc_;
  int port_ = 0;
};

TcpStoreOptions torch113(int port, std::chrono::milliseconds timeout = 5s) {
  TcpStoreOptions o;
  o.port = port;
  o.dialect = StoreDialect::kTorch113;
  o.timeout = timeout;
  return o;
}

TEST(TorchServerInterop, OurClientSpeaks113ToPyTorchsServer) {
  TorchStoreServer server;
  TcpStore s(torch113(server.port()));
  s.set("k", "v1");
  EXPECT_EQ(s.get("k"), "v1");
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -2), 3);
  EXPECT_EQ(s.compare_set("k", "v1", "v2"), "v2");
  EXPECT_EQ(s.compare_set("k", "zz", "v3"), "v2");
  EXPECT_EQ(s.compare_set("nokey", "exp", "des"), "exp");
  EXPECT_EQ(s.compare_set("nokey2", "", "des"), "des");
  EXPECT_EQ(s.num_keys(), 3);
  std::vector<std::string> keys{"k", "n"}, missing{"k", "absent"};
  EXPECT_TRUE(s.check(keys));
  EXPECT_FALSE(s.check(missing));
  EXPECT_TRUE(s.delete_key("nokey2"));
  EXPECT_FALSE(s.delete_key("nokey2"));
  // Composed from 1.13's commands: pipelined GETs, pipelined SETs, a compare_set loop.
  std::vector<std::string> mk{"a", "b"}, mv{"1", "two"};
  s.multi_set(mk, mv);
  EXPECT_EQ(s.multi_get(mk), mv);
  s.append("log", "ab");
  s.append("log", "cd");
  EXPECT_EQ(s.get("log"), "abcd");
}

TEST(TorchServerInterop, WaitTimeoutReconnectsBecause113CannotCancel) {
  TorchStoreServer server;
  TcpStore s(torch113(server.port(), 300ms));
  std::vector<std::string> never{"never"};
  EXPECT_THROW(s.wait(never, 200ms), StoreTimeoutError);
  // A fresh connection: the late STOP_WAITING of the old one cannot be misread.
  TcpStore other(torch113(server.port()));
  other.set("never", "x");
  EXPECT_EQ(s.add("after", 1), 1);
  EXPECT_EQ(s.get("never"), "x");
}

TEST(TorchServerInterop, PyTorchServerStallsOnAHalfSentRequestCohortdDoesNot) {
  // The behaviour cohortd exists to avoid (server_test.cc HalfSentRequestDelaysNobodyElse).
  TorchStoreServer server;
  RawClient staller(server.port());
  staller.send(unhex("00 ce f7"));  // a VALIDATE's first bytes: 1.13 reads a SET and blocks
  RawClient victim(server.port());
  victim.send(unhex("06"));  // GETNUMKEYS
  EXPECT_FALSE(victim.read(8, 1000ms)) << "PyTorch 1.13's server answered; did it change?";
  staller.send(unhex("85 3c"));  // a SET with a ~1 GB key: it stays blocked...
  EXPECT_FALSE(victim.read(8, 300ms));
}

}  // namespace
}  // namespace cohort
