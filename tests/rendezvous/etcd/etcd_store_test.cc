// EtcdStore against a real etcd: the cohort::Store semantics the rendezvous relies on, and the
// JSON gateway's message formats (captured in docs/ETCD.md).
#include "cohort/rdzv/etcd_store.h"
#include "cohort/error.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <future>
#include <thread>

#include "etcd/etcd_json.h"
#include "etcd_fixture.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;

TEST(EtcdJson, Base64RoundTripsAndRejectsGarbage) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "/w/a", std::string("\0\xff\x10", 3)}) {
    EXPECT_EQ(etcd::base64_decode(etcd::base64_encode(s)), s);
  }
  EXPECT_EQ(etcd::base64_encode("/w/a"), "L3cvYQ==");
  EXPECT_THROW(etcd::base64_decode("L3c"), ProtocolError);
  EXPECT_THROW(etcd::base64_decode("L3c*YQ=="), ProtocolError);
  EXPECT_THROW(etcd::base64_decode("L3=vYQ=="), ProtocolError);
}

TEST(EtcdJson, ResponsesAsEtcdWritesThem) {
  auto r = etcd::parse_range(
      R"({"header":{"cluster_id":"1","member_id":"2","revision":"9","raft_term":"2"},"kvs":[{"key":"L3cvYQ==","create_revision":"2","mod_revision":"9","version":"3","value":"MQ=="}],"count":"1"})");
  EXPECT_EQ(r.revision, 9);
  ASSERT_EQ(r.kvs.size(), 1u);
  EXPECT_EQ(r.kvs[0].key, "/w/a");
  EXPECT_EQ(r.kvs[0].value, "1");
  EXPECT_EQ(r.kvs[0].mod_revision, 9);
  // A missing key: no kvs, no count (proto3 omits them).
  EXPECT_TRUE(etcd::parse_range(R"({"header":{"revision":"3"}})").kvs.empty());
  auto t = etcd::parse_txn(
      R"({"header":{"revision":"9"},"responses":[{"response_range":{"header":{"revision":"9"},"kvs":[{"key":"YQ==","value":"Yg=="}],"count":"1"}}]})");
  EXPECT_FALSE(t.succeeded);
  ASSERT_TRUE(t.range);
  EXPECT_EQ(t.range->kvs[0].value, "b");
  EXPECT_TRUE(etcd::parse_txn(R"({"header":{},"succeeded":true,"responses":[{"response_put":{}}]})")
                  .succeeded);
  auto w = etcd::parse_watch_line(
      R"({"result":{"header":{"revision":"14"},"events":[{"type":"DELETE","kv":{"key":"L3cvYQ==","mod_revision":"14"}}]}})");
  ASSERT_EQ(w.events.size(), 1u);
  EXPECT_TRUE(w.events[0].deleted);
  EXPECT_TRUE(etcd::parse_watch_line(R"({"result":{"header":{},"created":true}})").created);
  EXPECT_EQ(etcd::parse_lease_grant(R"({"header":{},"ID":"478685763571075088","TTL":"3"})"),
            478685763571075088);
  EXPECT_EQ(etcd::parse_keepalive_ttl(R"({"result":{"header":{},"ID":"5"}})"), 0);
  EXPECT_EQ(etcd::parse_error(R"({"error":"etcdserver: requested lease not found","code":5})"),
            "etcdserver: requested lease not found");
  EXPECT_THROW(etcd::parse_range("[1,2]"), ProtocolError);
  EXPECT_THROW(etcd::parse_range(R"({"kvs":[{"key":5}]})"), ProtocolError);
  EXPECT_THROW(etcd::parse_range(R"({"header":{"revision":"x"}})"), ProtocolError);
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!etcd_.available()) GTEST_SKIP() << "etcd is not installed (scripts/setup.sh installs it)";
    EtcdStoreOptions o;
    o.port = etcd_.port();
    o.timeout = 5s;
    o.connect_timeout = 20s;
    o.prefix = "/test/";
    store_ = std::make_unique<EtcdStore>(o);
  }
  std::unique_ptr<EtcdStore> client() {
    EtcdStoreOptions o;
    o.port = etcd_.port();
    o.timeout = 5s;
    o.prefix = "/test/";
    return std::make_unique<EtcdStore>(o);
  }
  testing::EtcdServer etcd_;
  std::unique_ptr<EtcdStore> store_;
};

TEST_F(EtcdStoreTest, TheStoreSemantics) {
  auto& s = *store_;
  s.set("k", "v1");
  EXPECT_EQ(s.get("k"), "v1");
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -2), 3);
  EXPECT_EQ(s.get("n"), "3");
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
  std::vector<std::string> mk{"a", "b"}, mv{"1", std::string("\0two", 4)};
  s.multi_set(mk, mv);
  EXPECT_EQ(s.multi_get(mk), mv);
  s.append("log", "ab");
  s.append("log", "cd");
  EXPECT_EQ(s.get("log"), "abcd");
  s.set("word", "abc");
  EXPECT_THROW(s.add("word", 1), StoreError);
}

TEST_F(EtcdStoreTest, WaitWakesOnALatePutAndTimesOutNamingTheKey) {
  auto other = client();
  auto got = std::async(std::launch::async, [&] { return store_->get("late"); });
  EXPECT_EQ(got.wait_for(200ms), std::future_status::timeout);
  other->set("late", "here");
  EXPECT_EQ(got.get(), "here");
  std::vector<std::string> never{"never"};
  auto start = std::chrono::steady_clock::now();
  try {
    store_->wait(never, 300ms);
    FAIL();
  } catch (const StoreTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos);
  }
  // Never before its deadline: the watch's time is the time left rounded up, not down.
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST_F(EtcdStoreTest, ConcurrentAddsAreAtomic) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      auto c = client();
      for (int i = 0; i < 25; ++i) c->add("shared", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->get("shared"), "100");
}

TEST_F(EtcdStoreTest, InterruptEndsABlockedWait) {
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<std::string> keys{"never"};
    store_->wait(keys, std::chrono::hours(1));
  });
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
  store_->interrupt();
  EXPECT_THROW(waiting.get(), StoreError);
}

TEST_F(EtcdStoreTest, KeysWithATtlVanishUnlessRefreshed) {
  ASSERT_TRUE(store_->supports_ttl());
  store_->set_with_ttl("alive/a", "1", 1s);
  store_->set_with_ttl("alive/b", "1", 1s);
  std::vector<std::string> a{"alive/a"}, b{"alive/b"};
  auto until = std::chrono::steady_clock::now() + 10s;
  // Keep refreshing a; let b lapse.
  while (store_->check(b) && std::chrono::steady_clock::now() < until) {
    store_->set_with_ttl("alive/a", "1", 1s);
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_FALSE(store_->check(b));
  EXPECT_TRUE(store_->check(a));
}

TEST(EtcdStoreConnect, GivesUpNamingTheEndpoint) {
  EtcdStoreOptions o;
  o.port = 1;
  o.connect_timeout = 300ms;
  try {
    EtcdStore s(o);
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort
