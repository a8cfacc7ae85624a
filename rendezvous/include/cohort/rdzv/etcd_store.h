// cohort::EtcdStore: the cohort::Store interface over an etcd v3 server's JSON gateway (plain
// HTTP), so the elastic rendezvous runs unchanged on a replicated store.
//
//   set/get/delete      /v3/kv/put, /v3/kv/range, /v3/kv/deleterange
//   compare_set, add,   /v3/kv/txn: compare on the value (or on create_revision 0 for an absent
//   append, multi_set   key) or on mod_revision, retried on conflict
//   wait                /v3/kv/range, then /v3/watch from the next revision until the keys exist
//   set_with_ttl        /v3/lease/grant once per key, then /v3/lease/keepalive on every refresh
//
// Keys live under `prefix` (default "/cohort/") in etcd's flat key space. Failures throw
// StoreError naming the endpoint and etcd's message; deadlines StoreTimeoutError.
// Thread safety: safe for concurrent use (one request at a time per store; wait() uses its own
// connection so that interrupt() can end it).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cohort/rdzv/store.h"

namespace cohort {

struct EtcdStoreOptions {
  std::string host = "127.0.0.1";  // name, IPv4 or IPv6 literal
  int port = 2379;
  std::string prefix = "/cohort/";
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};         // get/wait deadline
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};  // until etcd answers
  const std::atomic<bool>* abandon = nullptr;  // as TcpStoreOptions::abandon
};

class EtcdStore final : public Store {
 public:
  // Checks that etcd answers (POST /v3/maintenance/status), retrying until connect_timeout;
  // throws StoreError.
  explicit EtcdStore(EtcdStoreOptions options);
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
  int64_t add(std::string_view key, int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool check(std::span<const std::string> keys) override;
  using Store::wait;
  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override;
  bool delete_key(std::string_view key) override;
  int64_t num_keys() override;
  std::vector<std::string> multi_get(std::span<const std::string> keys) override;
  void multi_set(std::span<const std::string> keys, std::span<const std::string> values) override;
  void append(std::string_view key, std::string_view value) override;
  std::chrono::milliseconds timeout() const override;
  void set_timeout(std::chrono::milliseconds timeout) override;
  std::string describe() const override;
  void interrupt() override;
  bool supports_ttl() const override { return true; }
  void set_with_ttl(std::string_view key, std::string_view value,
                    std::chrono::milliseconds ttl) override;

 private:
  class Http;
  // POSTs `body` to `path`; returns the parsed JSON text. Throws StoreError.
  std::string post(const std::string& path, const std::string& body, std::string_view key);
  // The value and mod_revision of `key` (revision 0 when absent), and the store revision.
  struct Read {
    bool found = false;
    std::string value;
    int64_t mod_revision = 0;
    int64_t revision = 0;
  };
  Read read(std::string_view key);
  std::string full(std::string_view key) const;

  EtcdStoreOptions options_;
  std::string base_url_;
  mutable std::mutex mu_;
  std::unique_ptr<Http> http_;        // guarded by mu_
  std::unique_ptr<Http> watch_http_;  // used by wait(), one at a time
  std::mutex watch_mu_;
  std::atomic<uint64_t> interrupts_{0};
  std::map<std::string, int64_t, std::less<>> leases_;  // key -> lease id; guarded by mu_
};

}  // namespace cohort
