// The etcd v3 JSON gateway's messages without an etcd: base64 both ways, int64 fields as strings,
// omitted fields as zero, each response kind, and malformed input refused by a ProtocolError.
// (etcd_store_test.cc runs the store against a real etcd; fuzz_etcd_response.cc fuzzes these.)
#include "etcd/etcd_json.h"

#include <gtest/gtest.h>

#include "cohort/error.h"

namespace cohort::etcd {
namespace {

TEST(EtcdJson, Base64AsRfc4648SaysIncludingPaddingAndEveryByte) {
  // RFC 4648 §10's test vectors.
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(plain), encoded);
    EXPECT_EQ(base64_decode(encoded), plain);
  }
  std::string every;
  for (int c = 0; c < 256; ++c) every.push_back(static_cast<char>(c));
  EXPECT_EQ(base64_decode(base64_encode(every)), every);
  EXPECT_EQ(base64_encode("\xfb\xff"), "+/8=");  // the last two letters of the alphabet
}

TEST(EtcdJson, InvalidBase64IsRefused) {
  for (const char* bad : {"Zg=", "Z===", "Zm9v!A==", "Zg==Zg==", "Zm=v", "-_8="})
    EXPECT_THROW(base64_decode(bad), ProtocolError) << bad;
}

TEST(EtcdJson, ARangeWithInt64sAsStringsAndZerosOmitted) {
  const RangeResult r = parse_range(
      R"({"header": {"cluster_id": "1", "revision": "42"}, "count": "2", "kvs": [
           {"key": "Zm9v", "value": "YmFy", "create_revision": "5", "mod_revision": "41",
            "version": "3", "lease": "7587"},
           {"key": "YQ==", "create_revision": "6", "mod_revision": "6"}]})");
  EXPECT_EQ(r.revision, 42);
  EXPECT_EQ(r.count, 2);
  ASSERT_EQ(r.kvs.size(), 2u);
  EXPECT_EQ(r.kvs[0].key, "foo");
  EXPECT_EQ(r.kvs[0].value, "bar");
  EXPECT_EQ(r.kvs[0].create_revision, 5);
  EXPECT_EQ(r.kvs[0].mod_revision, 41);
  EXPECT_EQ(r.kvs[0].lease, 7587);
  EXPECT_EQ(r.kvs[1].value, "");  // an empty value is omitted
  EXPECT_EQ(r.kvs[1].lease, 0);
  const RangeResult none = parse_range(R"({"header": {"revision": "9"}})");
  EXPECT_EQ(none.count, 0);
  EXPECT_TRUE(none.kvs.empty());
}

TEST(EtcdJson, ATransactionsOutcomeAndItsFirstRange) {
  TxnResult t = parse_txn(R"({"header": {"revision": "10"}, "succeeded": true, "responses": [
      {"response_put": {"header": {"revision": "10"}}},
      {"response_range": {"count": "1", "kvs": [{"key": "aw==", "value": "dg=="}]}},
      {"response_range": {"count": "0"}}]})");
  EXPECT_EQ(t.revision, 10);
  EXPECT_TRUE(t.succeeded);
  ASSERT_TRUE(t.range);
  ASSERT_EQ(t.range->kvs.size(), 1u);
  EXPECT_EQ(t.range->kvs[0].value, "v");
  t = parse_txn(R"({"header": {"revision": "11"}})");  // false is omitted
  EXPECT_FALSE(t.succeeded);
  EXPECT_FALSE(t.range);
}

TEST(EtcdJson, WatchLinesCreatedEventsAndCancelled) {
  WatchMessage m =
      parse_watch_line(R"({"result": {"header": {"revision": "3"}, "created": true}})");
  EXPECT_TRUE(m.created);
  EXPECT_FALSE(m.canceled);
  EXPECT_TRUE(m.events.empty());
  m = parse_watch_line(R"({"result": {"header": {"revision": "8"}, "events": [
      {"kv": {"key": "aw==", "value": "MQ==", "mod_revision": "8"}},
      {"type": "DELETE", "kv": {"key": "aw==", "mod_revision": "9"}}]}})");
  EXPECT_EQ(m.revision, 8);
  ASSERT_EQ(m.events.size(), 2u);
  EXPECT_FALSE(m.events[0].deleted);  // PUT is proto3's zero value: omitted
  EXPECT_EQ(m.events[0].kv.value, "1");
  EXPECT_TRUE(m.events[1].deleted);
  EXPECT_EQ(m.events[1].kv.mod_revision, 9);
  EXPECT_TRUE(parse_watch_line(R"({"result": {"canceled": true}})").canceled);
  try {
    parse_watch_line(R"({"error": "etcdserver: mvcc: required revision has been compacted",
                          "code": 11})");
    FAIL() << "no error";
  } catch (const ProtocolError& e) {
    EXPECT_EQ(std::string(e.what()),
              "etcd: etcdserver: mvcc: required revision has been compacted");
  }
}

TEST(EtcdJson, LeasesErrorsAndDeletions) {
  EXPECT_EQ(parse_lease_grant(R"({"header": {}, "ID": "7587869", "TTL": "15"})"), 7587869);
  EXPECT_THROW(parse_lease_grant(R"({"TTL": "15"})"), ProtocolError);  // no lease without an ID
  EXPECT_EQ(parse_keepalive_ttl(R"({"result": {"ID": "1", "TTL": "14"}})"), 14);
  EXPECT_EQ(parse_keepalive_ttl(R"({"result": {"ID": "1"}})"), 0);  // expired
  EXPECT_EQ(parse_keepalive_ttl(R"({"ID": "1", "TTL": "3"})"), 3);  // without the envelope
  EXPECT_EQ(parse_error(R"({"error": "etcdserver: request timed out", "code": 14})"),
            "etcdserver: request timed out");
  // A stream's error (grpc-gateway on a watch) carries its message inside an object.
  EXPECT_EQ(
      parse_error(
          R"({"error": {"grpc_code": 1, "http_code": 408, "message": "context canceled", "http_status": "Request Timeout"}})"),
      "context canceled");
  EXPECT_EQ(parse_error(R"({"error": {"grpc_code": 1}})"), "");
  EXPECT_EQ(parse_error(R"({"count": "1"})"), "");
  EXPECT_EQ(parse_error("not json"), "");
  EXPECT_EQ(parse_deleted(R"({"header": {}, "deleted": "1"})"), 1);
  EXPECT_EQ(parse_deleted(R"({"header": {}})"), 0);
}

TEST(EtcdJson, MalformedResponsesAreProtocolErrorsNeverCrashes) {
  for (const char* bad : {"", "[]", "not json", R"({"count": "12x"})", R"({"count": true})",
                          R"({"kvs": {}})", R"({"kvs": [1]})", R"({"kvs": [{"key": 5}]})",
                          R"({"kvs": [{"key": "***"}]})", R"({"count": "99999999999999999999"})"})
    EXPECT_THROW(parse_range(bad), ProtocolError) << bad;
  EXPECT_THROW(parse_txn(R"({"responses": {}})"), ProtocolError);
  EXPECT_THROW(parse_txn(R"({"responses": [{"response_range": 1}]})"), ProtocolError);
  EXPECT_THROW(parse_watch_line(R"({"result": {"events": [3]}})"), ProtocolError);
  EXPECT_THROW(parse_watch_line(R"({"other": 1})"), ProtocolError);
}

}  // namespace
}  // namespace cohort::etcd
