#include "etcd/etcd_json.h"
#include "cohort/error.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace cohort::etcd {
namespace {

using nlohmann::json;

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

json parse(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw ProtocolError("etcd: malformed JSON response");
  return j;
}

// int64 fields come as strings ("12") or, in requests we never read back, numbers.
int64_t int_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    try {
      size_t used = 0;
      long long v = std::stoll(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
      return v;
    } catch (const std::exception&) {
      throw ProtocolError(std::string("etcd: field '") + name + "' is not an integer");
    }
  }
  throw ProtocolError(std::string("etcd: field '") + name + "' has the wrong type");
}

std::string b64_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string())
    throw ProtocolError(std::string("etcd: field '") + name + "' is not a string");
  return base64_decode(it->get_ref<const std::string&>());
}

KeyValue kv_of(const json& j) {
  if (!j.is_object()) throw ProtocolError("etcd: a kv is not an object");
  KeyValue kv;
  kv.key = b64_field(j, "key");
  kv.value = b64_field(j, "value");
  kv.create_revision = int_field(j, "create_revision");
  kv.mod_revision = int_field(j, "mod_revision");
  kv.lease = int_field(j, "lease");
  return kv;
}

int64_t header_revision(const json& j) {
  auto h = j.find("header");
  if (h == j.end() || !h->is_object()) return 0;
  return int_field(*h, "revision");
}

RangeResult range_of(const json& j) {
  RangeResult r;
  r.revision = header_revision(j);
  r.count = int_field(j, "count");
  auto kvs = j.find("kvs");
  if (kvs != j.end()) {
    if (!kvs->is_array()) throw ProtocolError("etcd: 'kvs' is not an array");
    for (const auto& kv : *kvs) r.kvs.push_back(kv_of(kv));
  }
  return r;
}

}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4 != 0) throw ProtocolError("etcd: base64 length is not a multiple of 4");
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int a = val(in[i]), b = val(in[i + 1]);
    if (a < 0 || b < 0) throw ProtocolError("etcd: invalid base64");
    out += char((a << 2) | (b >> 4));
    bool last = i + 4 == in.size();
    if (in[i + 2] == '=') {
      if (!last || in[i + 3] != '=') throw ProtocolError("etcd: invalid base64 padding");
      break;
    }
    int c = val(in[i + 2]);
    if (c < 0) throw ProtocolError("etcd: invalid base64");
    out += char(((b & 15) << 4) | (c >> 2));
    if (in[i + 3] == '=') {
      if (!last) throw ProtocolError("etcd: invalid base64 padding");
      break;
    }
    int d = val(in[i + 3]);
    if (d < 0) throw ProtocolError("etcd: invalid base64");
    out += char(((c & 3) << 6) | d);
  }
  return out;
}

RangeResult parse_range(std::string_view text) {
  return range_of(parse(text));
}

TxnResult parse_txn(std::string_view text) {
  json j = parse(text);
  TxnResult t;
  t.revision = header_revision(j);
  auto s = j.find("succeeded");
  t.succeeded = s != j.end() && s->is_boolean() && s->get<bool>();
  auto responses = j.find("responses");
  if (responses != j.end()) {
    if (!responses->is_array()) throw ProtocolError("etcd: 'responses' is not an array");
    for (const auto& r : *responses) {
      if (!r.is_object()) throw ProtocolError("etcd: a txn response is not an object");
      auto rr = r.find("response_range");
      if (rr != r.end() && !t.range) {
        if (!rr->is_object()) throw ProtocolError("etcd: 'response_range' is not an object");
        t.range = range_of(*rr);
      }
    }
  }
  return t;
}

WatchMessage parse_watch_line(std::string_view text) {
  json j = parse(text);
  auto res = j.find("result");
  if (res == j.end() || !res->is_object()) {
    std::string err = parse_error(text);
    throw ProtocolError(err.empty() ? "etcd: watch message without 'result'" : "etcd: " + err);
  }
  WatchMessage m;
  m.revision = header_revision(*res);
  auto c = res->find("created");
  m.created = c != res->end() && c->is_boolean() && c->get<bool>();
  auto x = res->find("canceled");
  m.canceled = x != res->end() && x->is_boolean() && x->get<bool>();
  auto events = res->find("events");
  if (events != res->end()) {
    if (!events->is_array()) throw ProtocolError("etcd: 'events' is not an array");
    for (const auto& e : *events) {
      if (!e.is_object()) throw ProtocolError("etcd: an event is not an object");
      WatchEvent ev;
      auto type = e.find("type");
      ev.deleted = type != e.end() && type->is_string() && type->get<std::string>() == "DELETE";
      auto kv = e.find("kv");
      if (kv != e.end()) ev.kv = kv_of(*kv);
      m.events.push_back(std::move(ev));
    }
  }
  return m;
}

int64_t parse_lease_grant(std::string_view text) {
  json j = parse(text);
  int64_t id = int_field(j, "ID");
  if (id == 0) throw ProtocolError("etcd: lease grant without an ID");
  return id;
}

int64_t parse_keepalive_ttl(std::string_view text) {
  json j = parse(text);
  auto res = j.find("result");
  const json& r = (res != j.end() && res->is_object()) ? *res : j;
  return int_field(r, "TTL");
}

std::string parse_error(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {};
  auto e = j.find("error");
  // A stream's error (a watch) is an object: {"error": {"grpc_code": 5, "message": "..."}}.
  if (e != j.end() && e->is_object()) {
    auto m = e->find("message");
    if (m != e->end() && m->is_string()) return m->get<std::string>();
    return {};
  }
  if (e == j.end()) e = j.find("message");
  if (e == j.end() || !e->is_string()) return {};
  return e->get<std::string>();
}

int64_t parse_deleted(std::string_view text) {
  return int_field(parse(text), "deleted");
}

}  // namespace cohort::etcd
