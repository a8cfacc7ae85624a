// RoundStores: each round's workers' store starts empty, never takes a port that its claim refuses
// (one an earlier round of the job used; round_ops_test.cc tests the claim), and closes once a
// later round has formed, so that a client of an old round (one that reconnects, too) reaches its
// own round's store or nothing. In-process stores on 127.0.0.1.
#include "rdzv/round_stores.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cohort/error.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<TcpStore> client(int port) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = 2s;
  o.connect_timeout = 200ms;  // the tests dial closed ports on purpose
  return std::make_unique<TcpStore>(o);
}

// The local TCP ports (IPv4) of this process's sockets, listening ones only or all of them (bound,
// connected): the sockets of /proc/net/tcp whose inodes are this process's descriptors. Whether a
// port is free for anyone cannot be asked on a shared machine: another test's server may take a
// port the moment it is let go.
std::set<int> ports_of_this_process(bool listening_only) {
  std::set<std::string> own;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) own.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // the header
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    in >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
        inode;
    if (own.count(inode) && (!listening_only || state == "0A"))  // 0A: TCP_LISTEN
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return ports;
}

bool accept_any(int) {
  return true;
}

TEST(RoundStores, EachRoundHasAnEmptyStoreAndEarlierOnesCloseOnceTheNextHasFormed) {
  RoundStores stores("127.0.0.1", {});
  const int p0 = stores.open(0, accept_any);
  auto old_worker = client(p0);
  old_worker->set("default_pg/0//cpu//0/1", "round 0's address");
  const int p1 = stores.open(1, accept_any);
  ASSERT_NE(p0, p1);
  auto new_worker = client(p1);
  const std::vector<std::string> key{"default_pg/0//cpu//0/1"};
  EXPECT_FALSE(new_worker->check(key));
  EXPECT_EQ(stores.open(1, accept_any), p1) << "a round is opened once";
  EXPECT_EQ(stores.open_rounds(), (std::vector<int>{0, 1}));

  stores.close_before(1);
  EXPECT_EQ(stores.open_rounds(), (std::vector<int>{1}));
  const std::vector<std::string> late{"late"};
  // The old round's worker is cut off: its connection is closed (a SET, which has no reply, may
  // still leave it, into nothing), and reconnecting finds nothing.
  try {
    old_worker->set("late", "write");
  } catch (const StoreError&) {
  }
  EXPECT_THROW(old_worker->check(late), StoreError);
  EXPECT_THROW(client(p0), StoreError);
  EXPECT_FALSE(new_worker->check(late));
  new_worker->set("k", "v");  // the open round is untouched
  EXPECT_EQ(new_worker->get("k"), "v");
}

TEST(RoundStores, APortTheClaimRefusesIsHeldUntilAnotherIsAccepted) {
  RoundStores stores("127.0.0.1", {});
  std::vector<int> offered;
  const int port = stores.open(0, [&](int p) {
    offered.push_back(p);
    return offered.size() > 5;  // the first five were "used by earlier rounds"
  });
  ASSERT_EQ(offered.size(), 6u);
  EXPECT_EQ(port, offered.back());
  // Held while the search went on, so the kernel offered a different port every time.
  EXPECT_EQ(std::set<int>(offered.begin(), offered.end()).size(), offered.size());
  // The refused ports were let go; the accepted one serves.
  EXPECT_EQ(ports_of_this_process(/*listening_only=*/true).count(port), 1u);
  const std::set<int> held = ports_of_this_process(/*listening_only=*/false);
  for (size_t i = 0; i + 1 < offered.size(); ++i) EXPECT_EQ(held.count(offered[i]), 0u);
  client(port)->set("k", "v");
}

TEST(RoundStores, AClaimThatRefusesEveryPortIsAnErrorNotALoop) {
  RoundStores stores("127.0.0.1", {});
  try {
    stores.open(3, [](int) { return false; });
    FAIL() << "open() returned";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("round 3"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(stores.open_rounds().empty());
}

}  // namespace
}  // namespace cohort::launch
