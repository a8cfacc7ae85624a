// cohortd --data-dir: the log survives restarts and crashes; tagged writes run once however often
// they are retried.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <zlib.h>

#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../../common/subprocess.h"
#include "../hex.h"
#include "../raw_client.h"
#include "cohort/error.h"
#include "cohort/rdzv/server.h"
#include "cohort/rdzv/tcp_store.h"
#include "server/store_log.h"
#include "server/store_state.h"

namespace cohort::rdzv {
namespace {

using namespace std::chrono_literals;
using cohort::testing::RawClient;
using cohort::testing::Subprocess;
using cohort::testing::unhex;

struct NoListener : StoreListener {
  void on_wait_satisfied(SessionId) override {}
  void on_watch_event(SessionId, const WatchEvent&) override {}
};

class PersistenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort_persist_XXXXXX";
    dir_ = ::mkdtemp(templ);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  StoreServerOptions options(uint16_t port = 0) {
    StoreServerOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.data_dir = dir_;
    return o;
  }
  TcpStoreOptions client(int port) {
    TcpStoreOptions o;
    o.port = port;
    o.timeout = 5s;
    o.connect_timeout = 10s;
    o.tagged_writes = true;
    return o;
  }
  std::string dir_;
};

std::string S(std::string_view s) {
  std::string out;
  put_bytes(&out, s);
  return out;
}

TEST_F(PersistenceTest, KeysAndCountersSurviveARestart) {
  uint16_t port;
  {
    StoreServerThread server(options());
    port = server.port();
    TcpStore s(client(port));
    s.set("a", "1");
    s.set("b", std::string("\0bin", 4));
    EXPECT_EQ(s.add("n", 41), 41);
    s.append("log", "x");
    s.append("log", "y");
    s.set("gone", "z");
    EXPECT_TRUE(s.delete_key("gone"));
    EXPECT_EQ(s.compare_set("cas", "", "v"), "v");
  }
  StoreServerThread server(options(port));
  EXPECT_GE(server.stats().replayed_records, 8u);
  TcpStore s(client(port));
  EXPECT_EQ(s.get("a"), "1");
  EXPECT_EQ(s.get("b"), std::string("\0bin", 4));
  EXPECT_EQ(s.add("n", 1), 42);
  EXPECT_EQ(s.get("log"), "xy");
  EXPECT_EQ(s.get("cas"), "v");
  std::vector<std::string> gone{"gone"};
  EXPECT_FALSE(s.check(gone));
  EXPECT_EQ(s.num_keys(), 5);
}

TEST_F(PersistenceTest, ATornLastRecordIsDroppedAndWritingGoesOn) {
  uint16_t port;
  {
    StoreServerThread server(options());
    port = server.port();
    TcpStore s(client(port));
    s.set("kept", "1");
    EXPECT_EQ(s.get("kept"), "1");  // a round trip: the SET was served before we stop
  }
  // A crash in the middle of writing a record: a length, a CRC, half a payload.
  std::ofstream(dir_ + "/store.log", std::ios::app | std::ios::binary)
      << unhex("20000000 11223344 0102");
  {
    StoreServerThread server(options(port));
    TcpStore s(client(port));
    EXPECT_EQ(s.get("kept"), "1");
    s.set("after", "2");
    EXPECT_EQ(s.get("after"), "2");  // a round trip: the SET was served before we stop
  }
  StoreServerThread server(options(port));
  TcpStore s(client(port));
  EXPECT_EQ(s.get("kept"), "1");
  EXPECT_EQ(s.get("after"), "2");
}

// A flipped byte in the middle of the log is no torn write: nothing after it may be dropped
// silently (80 of 200 keys were, before). Refused by name and offset, the file untouched; the
// operator may accept the loss, and the damaged file is copied aside first.
TEST_F(PersistenceTest, DamageBeforeTheLastRecordIsRefusedUnlessTheLossIsAccepted) {
  uint16_t port;
  {
    StoreServerThread server(options());
    port = server.port();
    TcpStore s(client(port));
    for (int i = 0; i < 200; ++i)
      s.set(std::string("k").append(std::to_string(i)), std::string(40, 'v'));
    EXPECT_EQ(s.add("counter", 7), 7);
  }
  const std::string log = dir_ + "/store.log";
  std::string bytes;
  {
    std::ifstream f(log, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_GT(bytes.size(), 4000u);
  const size_t at = bytes.size() / 2;
  bytes[at] = static_cast<char>(bytes[at] ^ 0x20);
  std::ofstream(log, std::ios::binary | std::ios::trunc) << bytes;
  try {
    StoreServerThread server(options(port));
    FAIL() << "a log damaged in the middle was opened";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(log + " is damaged at offset "), std::string::npos) << what;
    EXPECT_NE(what.find("--accept-log-damage"), std::string::npos) << what;
  }
  {
    std::ifstream f(log, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), bytes) << "the file changed";
  }
  StoreServerOptions accept = options(port);
  accept.accept_log_damage = true;
  StoreServerThread server(accept);
  TcpStore s(client(port));
  EXPECT_EQ(s.get("k0"), std::string(40, 'v'));  // before the damage: kept
  const std::vector<std::string> counter{"counter"};
  EXPECT_FALSE(s.check(counter));  // after it: dropped, as accepted
  bool copied = false;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    if (e.path().filename().string().rfind("store.log.damaged-", 0) != 0) continue;
    std::ifstream f(e.path(), std::ios::binary);
    copied = std::string(std::istreambuf_iterator<char>(f), {}) == bytes;
  }
  EXPECT_TRUE(copied) << "no copy of the damaged log";
}

// Writes `keys` keys through a StoreLog in dir, then flips a byte in the middle of store.log;
// returns the damaged bytes.
std::string damaged_log(const std::string& dir, int keys) {
  NoListener none;
  {
    StoreState state(&none, 0);
    StoreLog journal(dir, &state, FsyncPolicy::kNever, /*accept_damage=*/true);
    for (int i = 0; i < keys; ++i) state.set("k" + std::to_string(i), std::string(40, 'v'));
  }
  const std::string log = dir + "/store.log";
  std::ifstream f(log, std::ios::binary);
  std::string bytes(std::istreambuf_iterator<char>(f), {});
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x20);
  std::ofstream(log, std::ios::binary | std::ios::trunc) << bytes;
  return bytes;
}

TEST_F(PersistenceTest, EachAcceptedDamageIsCopiedAsideUnderANameOfItsOwn) {
  // Twice within a second (copies were named by the second: the second one was refused).
  const std::string first = damaged_log(dir_, 200);
  NoListener none;
  std::string copies[2];
  {
    StoreState state(&none, 0);
    StoreLog journal(dir_, &state, FsyncPolicy::kNever, true);
    copies[0] = journal.damaged_copy();
  }
  const std::string second = damaged_log(dir_, 300);
  {
    StoreState state(&none, 0);
    StoreLog journal(dir_, &state, FsyncPolicy::kNever, true);
    copies[1] = journal.damaged_copy();
  }
  ASSERT_FALSE(copies[0].empty());
  ASSERT_FALSE(copies[1].empty());
  EXPECT_NE(copies[0], copies[1]);
  for (int i = 0; i < 2; ++i) {
    std::ifstream f(copies[i], std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), i == 0 ? first : second)
        << copies[i];
  }
}

TEST_F(PersistenceTest, ALogThatIsDueIsCompactedAtStartBeforeAnythingIsServed) {
  // Three generations of 4 keys of 1 MiB, as a cohortd killed before its first compaction check
  // (a second after its start) leaves them: 12 MiB of log for 4 MiB of data.
  NoListener none;
  {
    StoreState state(&none, 0);
    StoreLog journal(dir_, &state, FsyncPolicy::kNever);
    for (char gen : {'a', 'b', 'c'})
      for (int i = 0; i < 4; ++i) state.set("k" + std::to_string(i), std::string(1 << 20, gen));
  }
  const std::string log = dir_ + "/store.log";
  ASSERT_GT(std::filesystem::file_size(log), 12u << 20);
  StoreServerThread server(options());
  // Compacted by the time the server listens: no compaction check (a second on) has run yet.
  EXPECT_LT(std::filesystem::file_size(log), 5u << 20);
  EXPECT_FALSE(std::filesystem::exists(log + ".compact"));
  TcpStore s(client(server.port()));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.get("k" + std::to_string(i)), std::string(1 << 20, 'c'));
}

TEST_F(PersistenceTest, NotALogIsRefusedNamingTheFile) {
  std::ofstream(dir_ + "/store.log") << "something else entirely";
  try {
    StoreServerThread server(options());
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(dir_ + "/store.log"), std::string::npos) << e.what();
  }
}

TEST_F(PersistenceTest, ARetriedTaggedWriteRunsOnceEvenAcrossARestart) {
  auto tagged_add = [](uint64_t client, uint64_t request) {
    std::string t;
    put_u8(&t, kTaggedOpcode);
    put_u64(&t, client);
    put_u64(&t, request);
    return t + unhex("04") + S("n") + unhex("0500000000000000");  // ADD n 5, current numbering
  };
  uint16_t port;
  {
    StoreServerThread server(options());
    port = server.port();
    RawClient c(port);
    c.send(tagged_add(7, 1));
    EXPECT_EQ(testing::hex(*c.read(8)), "0500000000000000");
    c.send(tagged_add(7, 1));  // the same request again: the reply, not a second add
    EXPECT_EQ(testing::hex(*c.read(8)), "0500000000000000");
  }
  StoreServerThread server(options(port));
  RawClient c(port);
  c.send(tagged_add(7, 1));  // a retry after the restart
  EXPECT_EQ(testing::hex(*c.read(8)), "0500000000000000");
  c.send(tagged_add(7, 2));  // a new request
  EXPECT_EQ(testing::hex(*c.read(8)), "0a00000000000000");
  RawClient bad(port);
  bad.send(unhex("40") + std::string(16, '\1') + unhex("07"));  // tagging a read is refused
  EXPECT_TRUE(bad.closed_by_peer());
}

TEST_F(PersistenceTest, TheLogIsCompactedWhenItOutgrowsTheData) {
  NoListener listener;
  {
    StoreState state(&listener, 0);
    StoreLog log(dir_, &state, FsyncPolicy::kNever);
    std::string big(4096, 'v');
    for (int i = 0; i < 1000; ++i) state.set("same", big + std::to_string(i));
    EXPECT_GT(std::filesystem::file_size(dir_ + "/store.log"), 4000000u);
    EXPECT_TRUE(log.maybe_compact());
    EXPECT_LT(std::filesystem::file_size(dir_ + "/store.log"), 10000u);
    state.set("later", "x");
  }
  StoreState state(&listener, 0);
  StoreLog log(dir_, &state, FsyncPolicy::kNever);
  EXPECT_EQ(*state.get("same"), std::string(4096, 'v') + "999");
  EXPECT_EQ(*state.get("later"), "x");
}

// The compaction's child writes the state as of the fork; writes made meanwhile, appended to the
// old log, are carried into the new one. A child that dies leaves the old log as it was.
TEST_F(PersistenceTest, WritesMadeWhileTheChildCompactsReachTheNewLog) {
  NoListener listener;
  const std::string big(4096, 'v');
  auto wait_for_child = [](const StoreLog& log) {
    pollfd p{log.compaction_fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 30000), 1);
  };
  {
    StoreState state(&listener, 0);
    StoreLog log(dir_, &state, FsyncPolicy::kNever);
    for (int i = 0; i < 1000; ++i) state.set("same", big + std::to_string(i));
    // A child killed at work: the compaction is abandoned, nothing lost, no file left.
    ASSERT_TRUE(log.start_compaction());
    state.set("meanwhile0", "m0");
    ASSERT_TRUE(log.compacting());
    ASSERT_GT(log.compaction_child(), 0);
    ::kill(log.compaction_child(), SIGKILL);
    wait_for_child(log);  // its pipe closes
    EXPECT_THROW(log.finish_compaction(), Error);
    EXPECT_FALSE(log.compacting());
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/store.log.compact"));
    EXPECT_GT(std::filesystem::file_size(dir_ + "/store.log"), 4000000u);
    EXPECT_EQ(log.compactions(), 0u);
    // The next look compacts (the log grew since the last look).
    ASSERT_TRUE(log.start_compaction());
    for (int i = 0; i < 100; ++i)
      state.set("meanwhile" + std::to_string(i), "m" + std::to_string(i));
    state.append("same", "+tail");
    state.delete_key("meanwhile1");
    wait_for_child(log);
    state.set("after_child", "a");  // after the child's last copy: the loop copies it
    ASSERT_TRUE(log.finish_compaction());
    EXPECT_FALSE(log.compacting());
    EXPECT_EQ(log.compactions(), 1u);
    EXPECT_LT(std::filesystem::file_size(dir_ + "/store.log"), 20000u);
    EXPECT_EQ(std::filesystem::file_size(dir_ + "/store.log"), log.size());
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/store.log.compact"));
    state.set("later", "x");
  }
  StoreState state(&listener, 0);
  StoreLog log(dir_, &state, FsyncPolicy::kNever);
  EXPECT_EQ(*state.get("same"), big + "999+tail");
  EXPECT_EQ(state.get("meanwhile1"), nullptr);
  for (int i = 0; i < 100; ++i)
    if (i != 1) {
      EXPECT_EQ(*state.get("meanwhile" + std::to_string(i)), "m" + std::to_string(i));
    }
  EXPECT_EQ(*state.get("after_child"), "a");
  EXPECT_EQ(*state.get("later"), "x");
}

int threads_named(const std::string& name) {
  int n = 0;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(t.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++n;
  }
  return n;
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST_F(PersistenceTest, TheIntervalSyncRunsOnAThreadOfItsOwnAndLeavesNoDescriptor) {
  NoListener listener;
  StoreState state(&listener, 0);
  StoreLog log(dir_, &state, FsyncPolicy::kInterval);
  const size_t fds = open_descriptors();
  log.sync_in_background();  // nothing written: nothing to do, no thread
  EXPECT_EQ(log.background_syncs(), 0u);
  EXPECT_EQ(threads_named("cohortd-fsync"), 0);
  for (unsigned long round = 1; round <= 3; ++round) {
    state.set("k" + std::to_string(round), std::string(1 << 20, 'v'));
    log.sync_in_background();
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (log.background_syncs() < round && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    ASSERT_EQ(log.background_syncs(), round);
  }
  EXPECT_EQ(threads_named("cohortd-fsync"), 1);
  EXPECT_EQ(open_descriptors(), fds);  // each sync's duplicate descriptor closed
}

TEST_F(PersistenceTest, AppendsAreJournaledAsDeltas) {
  NoListener listener;
  const std::string kib(1024, 'a');
  uint64_t written = 0;
  {
    StoreState state(&listener, 0);
    StoreLog log(dir_, &state, FsyncPolicy::kNever);
    for (int i = 0; i < 2000; ++i) {
      state.append("grows", kib);
      if (i % 100 == 0) log.maybe_compact();  // as the server's timer does, once a second
    }
    written = log.bytes_written();
    std::printf("2,000 APPENDs of 1 KiB: %llu log bytes written, %llu compactions, file %ju\n",
                static_cast<unsigned long long>(written),
                static_cast<unsigned long long>(log.compactions()),
                static_cast<uintmax_t>(std::filesystem::file_size(dir_ + "/store.log")));
  }
  // O(total): 2 MB of values and 33 bytes of framing per append. The whole value each time would
  // be 2 GB.
  EXPECT_LT(written, 4u << 20);
  StoreState state(&listener, 0);
  StoreLog log(dir_, &state, FsyncPolicy::kNever);
  std::string expect;
  for (int i = 0; i < 2000; ++i) expect += kib;
  EXPECT_EQ(*state.get("grows"), expect);
}

TEST_F(PersistenceTest, AVersion1LogStillLoadsAndStaysReadableByOlderCohortd) {
  // A version 1 log as cohortd wrote it before APPEND deltas: "COHORTLG", u32 1, one SET record.
  std::string entry;
  put_u8(&entry, 1);
  put_bytes(&entry, "k");
  put_bytes(&entry, "v1");
  std::string file("COHORTLG", 8);
  put_u32(&file, 1);
  put_u32(&file, static_cast<uint32_t>(entry.size()));
  put_u32(&file, static_cast<uint32_t>(
                     ::crc32(0, reinterpret_cast<const Bytef*>(entry.data()), entry.size())));
  file += entry;
  std::ofstream(dir_ + "/store.log", std::ios::binary) << file;
  NoListener listener;
  {
    StoreState state(&listener, 0);
    StoreLog log(dir_, &state, FsyncPolicy::kNever);
    EXPECT_EQ(*state.get("k"), "v1");
    state.append("k", "+x");  // written as a SET: the file stays version 1
  }
  std::ifstream f(dir_ + "/store.log", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, 1u);
  StoreState state(&listener, 0);
  StoreLog log(dir_, &state, FsyncPolicy::kNever);
  EXPECT_EQ(*state.get("k"), "v1+x");
}

TEST_F(PersistenceTest, AnIdleStoreIsNotSnapshotted) {
  // 64 MB of data, a log grown past 1 MiB: the first look sizes the data; later looks, with
  // nothing written since, cost nothing. Before, each look built a whole snapshot (an idle
  // 400 MB store paused its loop for up to 850 ms every second or so).
  NoListener listener;
  StoreState state(&listener, 0);
  StoreLog log(dir_, &state, FsyncPolicy::kNever);
  const std::string mb(1 << 20, 'm');
  for (int i = 0; i < 64; ++i) state.set("key" + std::to_string(i), mb);
  EXPECT_FALSE(log.maybe_compact());
  // This thread's CPU time, which another process's load on a shared machine does not add to.
  auto thread_cpu = [] {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
  };
  const auto t0 = thread_cpu();
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(log.maybe_compact());
  const auto took = thread_cpu() - t0;
  // 100 snapshots of 64 MB take seconds of CPU; 100 looks at an unchanged log, microseconds.
  EXPECT_LT(took, 200ms) << "an idle store's compaction check did work";
  EXPECT_EQ(log.compactions(), 0u);
}

TEST_F(PersistenceTest, AnUntaggedMultiSetIsOneRecordKeptWholeOrNotAtAll) {
  {
    StoreServerThread server(options());
    RawClient c(server.port());
    Request r;
    r.op = Op::kValidate;
    r.u32 = kValidationMagic;
    std::string bytes;
    encode_request(Dialect::kCurrent, r, &bytes);
    r.clear();
    r.op = Op::kMultiSet;
    r.keys = {"a", "b", "c"};
    r.values = {"1", "2", "3"};
    encode_request(Dialect::kCurrent, r, &bytes);  // no reply
    r.clear();
    r.op = Op::kGet;
    r.keys = {"c"};
    encode_request(Dialect::kCurrent, r, &bytes);
    c.send(bytes);
    ASSERT_TRUE(c.read(8 + 1));  // the GET's reply: the MULTI_SET ran
  }
  // A crash in the middle of writing it: the record is torn, and all three keys are gone
  // together (as separate records, a and b would survive without c).
  const std::string path = dir_ + "/store.log";
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  NoListener listener;
  StoreState state(&listener, 0);
  StoreLog log(dir_, &state, FsyncPolicy::kNever);
  EXPECT_EQ(log.replayed_records(), 0u);
  EXPECT_TRUE(log.dropped_torn_tail());
  EXPECT_EQ(state.get("a"), nullptr);
  EXPECT_EQ(state.get("b"), nullptr);
  EXPECT_EQ(state.get("c"), nullptr);
}

// With the real log under each --fsync mode: when a watcher or a parked WAIT hears of a change,
// its record is already in store.log (so a SIGKILL after that cannot lose what they acted on).
// With --fsync always the record is also synced first: StoreLog::append_record() syncs before it
// returns, and the state releases the held events only after that.
TEST_F(PersistenceTest, WatchersAndWaitersHearOfAChangeOnlyOnceItIsInTheLogFile) {
  struct SizeAtEvent : StoreListener {
    std::string path;
    std::vector<uintmax_t> sizes;
    void on_wait_satisfied(SessionId) override {
      sizes.push_back(std::filesystem::file_size(path));
    }
    void on_watch_event(SessionId, const WatchEvent&) override {
      sizes.push_back(std::filesystem::file_size(path));
    }
  };
  for (FsyncPolicy policy : {FsyncPolicy::kAlways, FsyncPolicy::kInterval, FsyncPolicy::kNever}) {
    std::filesystem::remove_all(dir_);
    SizeAtEvent listener;
    listener.path = dir_ + "/store.log";
    StoreState state(&listener, 0);
    StoreLog log(dir_, &state, policy);
    state.watch(1, "k");
    std::vector<std::string_view> keys = {"k"};
    ASSERT_EQ(state.wait(2, keys), StoreState::WaitResult::kParked);
    const uintmax_t before = std::filesystem::file_size(listener.path);
    state.set("k", "v");
    ASSERT_EQ(listener.sizes.size(), 2u);  // the watcher, then the waiter
    for (uintmax_t at_event : listener.sizes)
      EXPECT_EQ(at_event, std::filesystem::file_size(listener.path))
          << "told before the record was written (policy " << static_cast<int>(policy) << ")";
    EXPECT_GT(listener.sizes[0], before);
    // A MULTI_SET-like batch: told once the whole batch (one record) is written.
    listener.sizes.clear();
    state.begin_batch();
    state.set("k", "v2");
    state.set("other", "x");
    EXPECT_TRUE(listener.sizes.empty());
    const uintmax_t mid = std::filesystem::file_size(listener.path);
    state.end_batch();
    ASSERT_EQ(listener.sizes.size(), 1u);
    EXPECT_GT(listener.sizes[0], mid);
    EXPECT_EQ(listener.sizes[0], std::filesystem::file_size(listener.path));
  }
}

TEST_F(PersistenceTest, ClientsCarryOnThroughASigkilledCohortdWithoutDoublingAnyAdd) {
  // A real cohortd, killed with SIGKILL twice while a client adds; restarted on the same port.
  int port;
  {
    StoreServerOptions probe;
    probe.host = "127.0.0.1";
    probe.port = 0;
    StoreServerThread t(probe);
    port = t.port();
  }
  auto start = [&] {
    auto p = std::make_unique<Subprocess>(
        std::vector<std::string>{COHORTD_BIN, "--host", "127.0.0.1", "--port", std::to_string(port),
                                 "--data-dir", dir_, "--fsync", "never"});
    EXPECT_TRUE(p->read_line(10s));
    return p;
  };
  auto cohortd = start();
  constexpr int kAdds = 300;
  std::atomic<int> done{0};
  std::exception_ptr failure;
  std::thread adder([&] {
    try {
      TcpStore s(client(port));
      for (int i = 0; i < kAdds; ++i) {
        s.add("count", 1);
        done = i + 1;
      }
    } catch (...) {
      failure = std::current_exception();
    }
  });
  for (int round = 0; round < 2; ++round) {
    int before = done.load();
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (done.load() < before + 50 && std::chrono::steady_clock::now() < deadline && !failure)
      std::this_thread::sleep_for(1ms);
    cohortd->signal(SIGKILL);
    ASSERT_TRUE(cohortd->wait(5s));
    cohortd = start();
  }
  adder.join();
  if (failure) std::rethrow_exception(failure);
  TcpStore check(client(port));
  EXPECT_EQ(check.get("count"), std::to_string(kAdds));
}

}  // namespace
}  // namespace cohort::rdzv
