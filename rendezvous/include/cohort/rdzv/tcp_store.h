// cohort::TcpStore: a client of a TCPStore-protocol server (cohortd, cohortrun's embedded store,
// or PyTorch's own TCPStore server).
//
// The dialect is the caller's choice, never probed: kCurrent (default) for cohortd and PyTorch
// 2.2+ servers; kTorch113 for PyTorch 1.13/2.0 servers (a 1.13 server reads a VALIDATE as a SET
// with a gigabyte-long key and stalls every client, so probing is not an option).
//
// Connecting retries refused/unreachable connections with exponential backoff and jitter until
// connect_timeout. A connection lost between requests is re-established on the next call; one lost
// during a request is retried once for idempotent requests (get, set, wait, check, multi_*,
// num_keys, delete_key) and reported for add, compare_set and append, whose effect is then unknown.
//
// With kTorch113 the operations 1.13 lacks are composed: multi_get = WAIT + pipelined GETs,
// multi_set = pipelined SETs, append = a compare_set loop; a timed-out wait closes the connection
// (1.13 cannot cancel a wait, and its late reply would desynchronise the stream).
//
// Thread safety: safe for concurrent use; requests are serialised on one connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "cohort/rdzv/store.h"

namespace cohort {

enum class StoreDialect { kCurrent, kTorch113 };

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // name, IPv4 or IPv6 literal (brackets optional)
  int port = 29500;
  StoreDialect dialect = StoreDialect::kCurrent;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};         // get/wait deadline
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};  // total connect deadline
  // When set and true, connecting stops retrying (checked between attempts); lets an owner shut
  // down while a connect is still waiting for the server to appear. Must outlive the store.
  const std::atomic<bool>* abandon = nullptr;
  // cohortd with --auth-token-file: prove knowledge of this token at connect (auth.h). A server
  // without a token accepts the proof too; PyTorch's servers do not know the handshake.
  std::string auth_token;
  // cohortd only (codec.h kTaggedOpcode): tag add/compare_set/append with a request id, so that
  // they too are retried after a lost connection or a restarted cohortd without running twice.
  // Needs the current dialect. The first connection asks whether the server knows the tag (a
  // tagged DELETE_KEY of a key nobody uses); PyTorch's servers close the connection at it. The
  // libuv one (it answers QUEUE_LEN) is then used with plain operations, and on_foreign_server
  // told why; the classic one, whose COMPARE_SET wakes no waiter, is refused (StoreError).
  bool tagged_writes = false;
  std::function<void(const std::string& why)> on_foreign_server;
  // The largest value (or key, in LIST_KEYS) a reply may carry: a longer one is refused before
  // it is read (the call fails with StoreError and the connection is dropped), so that a reader
  // of records any client may write (cohortctl) holds no more than this per value.
  uint64_t max_reply_bytes = 1ull << 32;
};

class TcpStore final : public Store {
 public:
  // Connects (with retries); throws StoreError naming the address and the last errno when the
  // server cannot be reached before connect_timeout.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

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

  // Every key in the store, sorted (cohortd's LIST_KEYS). Needs the current dialect and a server
  // that knows LIST_KEYS (cohortd; PyTorch's servers before it was added close the connection at
  // it): throws StoreError saying so otherwise.
  std::vector<std::string> list_keys();

  // "host:port" of the server.
  const std::string& address() const { return address_; }
  // False when tagged writes were asked for and the server turned out not to be cohortd.
  bool tags_writes() const { return tagging_.load(); }

  // Shuts the connection down, so a blocked call fails at once; the next call reconnects.
  void interrupt() override;

 private:
  class Connection;

  // Connects and, in the current dialect, sends VALIDATE + PING. REQUIRES: mu_ held.
  void reconnect_locked();
  // REQUIRES: mu_ held.
  void drop_connection_locked();
  // The token handshake (when configured), then VALIDATE + PING in the current dialect.
  void handshake_locked(Connection& conn, std::chrono::steady_clock::time_point deadline);
  // Runs fn(connection, deadline) under mu_, reconnecting first when needed; a lost connection is
  // retried once when `idempotent`. Turns transport failures into StoreError/StoreTimeoutError.
  template <typename Fn>
  auto call(bool idempotent, std::string_view op, std::string_view key, Fn&& fn);
  // The tag of a new tagged write ("" when tagging is off).
  std::string tag();
  // wait() with mu_ held.
  void wait_locked(Connection& c, std::span<const std::string> keys,
                   std::chrono::milliseconds timeout);

  TcpStoreOptions options_;
  std::string address_;
  mutable std::mutex mu_;
  std::unique_ptr<Connection> conn_;  // guarded by mu_; null after a failure until reconnected
  std::mutex fd_mu_;                  // taken while conn_ changes and by interrupt()
  int live_fd_ = -1;                  // conn_'s socket, guarded by fd_mu_
  std::atomic<uint64_t> interrupts_{0};
  uint64_t client_id_ = 0;            // random, for tagged writes
  std::atomic<bool> tagging_{false};  // options_.tagged_writes, until the server says no
  // What the next handshake asks the server (guarded by mu_): whether it knows cohortd's tags,
  // then, if not, whether it is PyTorch's libuv server; nothing once known.
  enum class Probe { kTag, kQueue, kNone };
  Probe probe_ = Probe::kTag;
  uint64_t next_request_ = 1;  // guarded by mu_
};

}  // namespace cohort
