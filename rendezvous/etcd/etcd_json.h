// The etcd v3 JSON gateway's messages: building requests and reading responses, without I/O.
// etcd writes int64 fields as JSON strings and omits zero, false and empty fields (proto3 JSON);
// keys and values are standard base64 (docs/ETCD.md). Every parser throws
// std::runtime_error on malformed input and never crashes on hostile input (fuzzed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::etcd {

std::string base64_encode(std::string_view bytes);
// Throws std::runtime_error on invalid input.
std::string base64_decode(std::string_view text);

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct RangeResult {
  int64_t revision = 0;  // of the store when read
  int64_t count = 0;
  std::vector<KeyValue> kvs;
};

struct TxnResult {
  int64_t revision = 0;
  bool succeeded = false;
  std::optional<RangeResult> range;  // the first response_range, when the branch had one
};

struct WatchEvent {
  bool deleted = false;
  KeyValue kv;
};

struct WatchMessage {
  int64_t revision = 0;
  bool created = false;
  bool canceled = false;
  std::vector<WatchEvent> events;
};

RangeResult parse_range(std::string_view json);
TxnResult parse_txn(std::string_view json);
// One line of the /v3/watch stream ({"result": {...}}).
WatchMessage parse_watch_line(std::string_view json);
// /v3/lease/grant -> the lease id; /v3/lease/keepalive -> the remaining TTL in seconds (0 when the
// lease has expired).
int64_t parse_lease_grant(std::string_view json);
int64_t parse_keepalive_ttl(std::string_view json);
// etcd's error body ({"error": "...", "code": N}); "" when it is not one.
std::string parse_error(std::string_view json);
// The deleted count of /v3/kv/deleterange.
int64_t parse_deleted(std::string_view json);

}  // namespace cohort::etcd
