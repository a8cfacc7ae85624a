#include "cohort/rdzv/etcd_store.h"

#include <curl/curl.h>
#include <dlfcn.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cohort/base/deadline.h"
#include "cohort/base/net.h"
#include "cohort/error.h"
#include "etcd/etcd_json.h"

namespace cohort {
namespace {

using Clock = std::chrono::steady_clock;
using etcd::base64_encode;
using nlohmann::json;

// libcurl, opened on first use rather than linked: linking would load its two dozen libraries
// (GnuTLS, Kerberos, LDAP, ...) into every cohortrun at start, about 5 ms of each launch, for a
// backend that most jobs never use.
struct CurlApi {
  CURLcode (*global_init)(long flags);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL* handle);
  CURLcode (*easy_setopt)(CURL* handle, CURLoption option, ...);
  CURLcode (*easy_perform)(CURL* handle);
  CURLcode (*easy_getinfo)(CURL* handle, CURLINFO info, ...);
  const char* (*easy_strerror)(CURLcode code);
};

template <typename Fn>
void bind(void* lib, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (*fn == nullptr) throw IoError(std::string("etcd backend: libcurl lacks ") + name);
}

// Throws IoError when libcurl cannot be loaded (then every later call tries again).
const CurlApi& curl() {
  static const CurlApi api = [] {
    void* lib = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      throw IoError(std::string("--rdzv-backend etcd needs libcurl (Debian: apt-get install "
                                "libcurl4): ") +
                    ::dlerror());
    }
    CurlApi a{};
    bind(lib, "curl_global_init", &a.global_init);
    bind(lib, "curl_easy_init", &a.easy_init);
    bind(lib, "curl_easy_cleanup", &a.easy_cleanup);
    bind(lib, "curl_easy_setopt", &a.easy_setopt);
    bind(lib, "curl_easy_perform", &a.easy_perform);
    bind(lib, "curl_easy_getinfo", &a.easy_getinfo);
    bind(lib, "curl_easy_strerror", &a.easy_strerror);
    a.global_init(CURL_GLOBAL_DEFAULT);
    return a;
  }();
  return api;
}

// Tells a transfer to stop: the store was interrupted, or its owner abandons it.
struct AbortCheck {
  const std::atomic<uint64_t>* interrupts = nullptr;
  uint64_t at_start = 0;
  const std::atomic<bool>* abandon = nullptr;
  bool should_stop() const {
    return (interrupts && interrupts->load() != at_start) || (abandon && abandon->load());
  }
};

int on_progress(void* p, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<AbortCheck*>(p)->should_stop() ? 1 : 0;
}

// A transport failure (refused, reset, timed out): the request may be retried.
struct TransportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// std::stoll's rules, as the TCP store applies them to ADD.
bool parse_counter(const std::string& s, int64_t* out) {
  try {
    size_t used = 0;
    *out = std::stoll(s, &used);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::string prefix_end(std::string prefix) {
  // The first key after every key starting with `prefix`: its last byte plus one.
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

}  // namespace

class EtcdStore::Http {
 public:
  Http() {
    curl_ = curl().easy_init();
    if (curl_ == nullptr) throw StoreError("etcd: curl_easy_init failed", "", "");
  }
  ~Http() { curl().easy_cleanup(curl_); }
  Http(const Http&) = delete;
  Http& operator=(const Http&) = delete;

  // POSTs `body`; on_data sees the response as it arrives and returns false to stop early.
  // Returns the HTTP status. Throws TransportError, or StoreError when stopped by `abort`.
  long post(const std::string& url, const std::string& body, std::chrono::milliseconds timeout,
            const std::function<bool(std::string_view)>& on_data, AbortCheck abort) {
    struct Sink {
      const std::function<bool(std::string_view)>* on_data;
      bool stopped = false;
    } sink{&on_data};
    auto write = +[](char* ptr, size_t size, size_t n, void* p) -> size_t {
      auto* s = static_cast<Sink*>(p);
      if (!(*s->on_data)(std::string_view(ptr, size * n))) {
        s->stopped = true;
        return 0;  // ends the transfer
      }
      return size * n;
    };
    curl().easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl().easy_setopt(curl_, CURLOPT_POST, 1L);
    curl().easy_setopt(curl_, CURLOPT_POSTFIELDS, body.c_str());
    curl().easy_setopt(curl_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl().easy_setopt(curl_, CURLOPT_WRITEFUNCTION, write);
    curl().easy_setopt(curl_, CURLOPT_WRITEDATA, &sink);
    curl().easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl().easy_setopt(curl_, CURLOPT_TIMEOUT_MS,
                       static_cast<long>(std::max<int64_t>(1, timeout.count())));
    curl().easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl().easy_setopt(curl_, CURLOPT_NOPROXY, "*");
    curl().easy_setopt(curl_, CURLOPT_NOPROGRESS, 0L);
    curl().easy_setopt(curl_, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl().easy_setopt(curl_, CURLOPT_XFERINFODATA, &abort);
    curl().easy_setopt(curl_, CURLOPT_TCP_NODELAY, 1L);
    CURLcode rc = curl().easy_perform(curl_);
    if (sink.stopped) return 200;
    if (rc == CURLE_ABORTED_BY_CALLBACK) throw StoreError("etcd request interrupted", "", url);
    if (rc == CURLE_OPERATION_TIMEDOUT) throw StoreTimeoutError("etcd request timed out", "", url);
    if (rc != CURLE_OK) throw TransportError(curl().easy_strerror(rc));
    long status = 0;
    curl().easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
    return status;
  }

 private:
  CURL* curl_ = nullptr;
};

EtcdStore::EtcdStore(EtcdStoreOptions options) : options_(std::move(options)) {
  base_url_ = "http://" + format_host_port(strip_brackets(options_.host), options_.port);
  http_ = std::make_unique<Http>();
  watch_http_ = std::make_unique<Http>();
  // etcd may still be starting (or a node may start before it): retry until it answers.
  auto deadline = Clock::now() + options_.connect_timeout;
  auto backoff = std::chrono::milliseconds(20);
  for (;;) {
    try {
      std::string body;
      long status = http_->post(
          base_url_ + "/v3/maintenance/status", "{}", std::chrono::seconds(10),
          [&](std::string_view d) {
            body.append(d);
            return true;
          },
          AbortCheck{nullptr, 0, options_.abandon});
      if (status == 200) break;
      throw TransportError("HTTP " + std::to_string(status) + " " + body);
    } catch (const TransportError& e) {
      if (Clock::now() >= deadline || (options_.abandon && options_.abandon->load())) {
        throw StoreError("cannot reach etcd at " + base_url_ + " within " +
                             std::to_string(options_.connect_timeout.count()) + " ms: " + e.what(),
                         "", base_url_);
      }
      std::this_thread::sleep_for(std::min(
          backoff, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }
}

EtcdStore::~EtcdStore() = default;

std::string EtcdStore::full(std::string_view key) const {
  return options_.prefix + std::string(key);
}
std::string EtcdStore::describe() const {
  return "etcd " + base_url_;
}

std::chrono::milliseconds EtcdStore::timeout() const {
  std::lock_guard lock(mu_);
  return options_.timeout;
}
void EtcdStore::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  options_.timeout = timeout;
}

void EtcdStore::interrupt() {
  ++interrupts_;
}

std::string EtcdStore::post(const std::string& path, const std::string& body,
                            std::string_view key) {
  // REQUIRES: mu_ held.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    std::string out;
    try {
      long status = http_->post(
          base_url_ + path, body,
          std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(30)),
          [&](std::string_view d) {
            out.append(d);
            return true;
          },
          AbortCheck{&interrupts_, interrupts_.load(), options_.abandon});
      if (status != 200) {
        std::string err = etcd::parse_error(out);
        throw StoreError("etcd at " + base_url_ + " refused " + path + ": " +
                             (err.empty() ? out : err) + " (HTTP " + std::to_string(status) + ")",
                         std::string(key), base_url_);
      }
      return out;
    } catch (const TransportError& e) {
      if (Clock::now() >= deadline) {
        throw StoreError("etcd at " + base_url_ + " unreachable for " + path + ": " + e.what(),
                         std::string(key), base_url_);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

EtcdStore::Read EtcdStore::read(std::string_view key) {
  // REQUIRES: mu_ held.
  auto r =
      etcd::parse_range(post("/v3/kv/range", json{{"key", base64_encode(full(key))}}.dump(), key));
  Read out;
  out.revision = r.revision;
  if (!r.kvs.empty()) {
    out.found = true;
    out.value = r.kvs.front().value;
    out.mod_revision = r.kvs.front().mod_revision;
  }
  return out;
}

void EtcdStore::set(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  post("/v3/kv/put",
       json{{"key", base64_encode(full(key))}, {"value", base64_encode(value)}}.dump(), key);
}

std::string EtcdStore::get(std::string_view key) {
  std::string k(key);
  wait(std::span<const std::string>(&k, 1), timeout());
  std::lock_guard lock(mu_);
  return read(key).value;
}

namespace {

// A txn: put `value` at `key` if `compare` holds, else read the key.
json txn(const std::string& key, const std::string& value, json compare) {
  return json{
      {"compare", json::array({std::move(compare)})},
      {"success",
       json::array({json{
           {"request_put", {{"key", base64_encode(key)}, {"value", base64_encode(value)}}}}})},
      {"failure", json::array({json{{"request_range", {{"key", base64_encode(key)}}}}})}};
}

json absent(const std::string& key) {
  return json{{"key", base64_encode(key)},
              {"target", "CREATE"},
              {"result", "EQUAL"},
              {"create_revision", "0"}};
}

json same_revision(const std::string& key, int64_t mod_revision) {
  return json{{"key", base64_encode(key)},
              {"target", "MOD"},
              {"result", "EQUAL"},
              {"mod_revision", std::to_string(mod_revision)}};
}

}  // namespace

std::string EtcdStore::compare_set(std::string_view key, std::string_view expected,
                                   std::string_view desired) {
  std::lock_guard lock(mu_);
  const std::string k = full(key);
  for (;;) {
    json cmp = expected.empty() ? absent(k)
                                : json{{"key", base64_encode(k)},
                                       {"target", "VALUE"},
                                       {"result", "EQUAL"},
                                       {"value", base64_encode(expected)}};
    auto t = etcd::parse_txn(post("/v3/kv/txn", txn(k, std::string(desired), cmp).dump(), key));
    if (t.succeeded) return std::string(desired);
    bool found = t.range && !t.range->kvs.empty();
    if (!found) return std::string(expected);  // PyTorch's quirk: echo `expected`, write nothing
    const std::string& current = t.range->kvs.front().value;
    if (expected.empty() && current.empty()) {
      // Present with an empty value equals an empty `expected`: replace it at that revision.
      auto again = etcd::parse_txn(post(
          "/v3/kv/txn",
          txn(k, std::string(desired), same_revision(k, t.range->kvs.front().mod_revision)).dump(),
          key));
      if (again.succeeded) return std::string(desired);
      continue;
    }
    return current;
  }
}

int64_t EtcdStore::add(std::string_view key, int64_t delta) {
  std::lock_guard lock(mu_);
  const std::string k = full(key);
  for (;;) {
    Read r = read(key);
    int64_t current = 0;
    if (r.found && !parse_counter(r.value, &current)) {
      throw StoreError("add on a key whose value is not a decimal integer", std::string(key),
                       base_url_);
    }
    int64_t sum =
        static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));
    json cmp = r.found ? same_revision(k, r.mod_revision) : absent(k);
    auto t = etcd::parse_txn(post("/v3/kv/txn", txn(k, std::to_string(sum), cmp).dump(), key));
    if (t.succeeded) return sum;
  }
}

void EtcdStore::append(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  const std::string k = full(key);
  for (;;) {
    Read r = read(key);
    json cmp = r.found ? same_revision(k, r.mod_revision) : absent(k);
    auto t =
        etcd::parse_txn(post("/v3/kv/txn", txn(k, r.value + std::string(value), cmp).dump(), key));
    if (t.succeeded) return;
  }
}

bool EtcdStore::check(std::span<const std::string> keys) {
  std::lock_guard lock(mu_);
  for (const auto& k : keys)
    if (!read(k).found) return false;
  return true;
}

void EtcdStore::wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const uint64_t interrupts_at_start = interrupts_.load();
  std::lock_guard watch_lock(watch_mu_);
  for (const auto& key : keys) {
    for (;;) {
      Read r;
      {
        std::lock_guard lock(mu_);
        r = read(key);
      }
      if (r.found) break;
      // Rounded up, so that the wait never ends before its deadline (cohort/base/deadline.h).
      const std::chrono::milliseconds left(poll_ms_left(deadline));
      if (left.count() == 0) {
        throw StoreTimeoutError("wait timed out after " + std::to_string(timeout.count()) +
                                    " ms on " + base_url_ + "; key not set: '" + key + "'",
                                key, base_url_);
      }
      // Watch from the revision after our read: a put in between cannot be missed.
      json body{{"create_request",
                 {{"key", base64_encode(full(key))},
                  {"start_revision", std::to_string(r.revision + 1)}}}};
      bool seen = false;
      std::string pending;
      try {
        watch_http_->post(
            base_url_ + "/v3/watch", body.dump(), left,
            [&](std::string_view d) {
              pending.append(d);
              size_t nl;
              while ((nl = pending.find('\n')) != std::string::npos) {
                std::string line = pending.substr(0, nl);
                pending.erase(0, nl + 1);
                if (line.empty()) continue;
                auto m = etcd::parse_watch_line(line);
                for (const auto& e : m.events)
                  if (!e.deleted) seen = true;
                if (m.canceled) return false;
              }
              return !seen;
            },
            AbortCheck{&interrupts_, interrupts_at_start, options_.abandon});
      } catch (const StoreTimeoutError&) {
        // The deadline: the next read decides.
      } catch (const TransportError& e) {
        throw StoreError("etcd watch on '" + key + "' failed: " + e.what(), key, base_url_);
      } catch (const std::runtime_error& e) {
        if (dynamic_cast<const StoreError*>(&e)) throw;
        throw StoreError(std::string("etcd watch: ") + e.what(), key, base_url_);
      }
    }
  }
}

bool EtcdStore::delete_key(std::string_view key) {
  std::lock_guard lock(mu_);
  return etcd::parse_deleted(
             post("/v3/kv/deleterange", json{{"key", base64_encode(full(key))}}.dump(), key)) == 1;
}

int64_t EtcdStore::num_keys() {
  std::lock_guard lock(mu_);
  json body{{"key", base64_encode(options_.prefix)},
            {"range_end", base64_encode(prefix_end(options_.prefix))},
            {"count_only", true}};
  return etcd::parse_range(post("/v3/kv/range", body.dump(), "")).count;
}

std::vector<std::string> EtcdStore::multi_get(std::span<const std::string> keys) {
  wait(keys, timeout());
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(read(k).value);
  return out;
}

void EtcdStore::multi_set(std::span<const std::string> keys, std::span<const std::string> values) {
  if (keys.size() != values.size())
    throw StoreError("multi_set needs as many values as keys", "", base_url_);
  if (keys.empty()) return;
  json puts = json::array();
  for (size_t i = 0; i < keys.size(); ++i) {
    puts.push_back(
        json{{"request_put",
              {{"key", base64_encode(full(keys[i]))}, {"value", base64_encode(values[i])}}}});
  }
  std::lock_guard lock(mu_);
  post("/v3/kv/txn", json{{"success", puts}}.dump(), keys[0]);
}

void EtcdStore::set_with_ttl(std::string_view key, std::string_view value,
                             std::chrono::milliseconds ttl) {
  std::lock_guard lock(mu_);
  auto it = leases_.find(key);
  if (it != leases_.end()) {
    auto ttl_left = etcd::parse_keepalive_ttl(
        post("/v3/lease/keepalive", json{{"ID", std::to_string(it->second)}}.dump(), key));
    if (ttl_left > 0) return;  // refreshed
    leases_.erase(it);         // expired: the key is gone; grant a new lease below
  }
  int64_t seconds = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ttl.count() / 1000.0)));
  int64_t id = etcd::parse_lease_grant(post("/v3/lease/grant", json{{"TTL", seconds}}.dump(), key));
  post("/v3/kv/put",
       json{{"key", base64_encode(full(key))},
            {"value", base64_encode(value)},
            {"lease", std::to_string(id)}}
           .dump(),
       key);
  leases_.emplace(std::string(key), id);
}

}  // namespace cohort
