// cohort::Store: the key-value store that launchers and workers rendezvous through.
//
// Backends: TcpStore (a cohortd or PyTorch TCPStore server, tcp_store.h), MemoryStore (in-process,
// memory_store.h) and PrefixStore (a namespaced view of another store, prefix_store.h).
//
// Semantics follow PyTorch's c10d::Store: values are byte strings; add() keeps a decimal counter;
// get() waits for the key to appear, up to timeout(); compare_set() returns the value now stored
// (the caller succeeded iff it equals `desired`; on a missing key with a non-empty `expected` it
// returns `expected` without writing, as PyTorch does).
//
// Failures throw cohort::StoreError (StoreTimeoutError for deadlines), naming the key and server.
// Thread safety: each implementation says; TcpStore and MemoryStore are safe for concurrent use.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/error.h"

namespace cohort {

class Store {
 public:
  virtual ~Store() = default;

  // Stores `value` under `key`, waking every waiter on it.
  virtual void set(std::string_view key, std::string_view value) = 0;

  // Returns the value of `key`, waiting up to timeout() for it to be set.
  // Throws StoreTimeoutError when it does not appear in time.
  virtual std::string get(std::string_view key) = 0;

  // Adds `delta` to the decimal counter under `key` (a missing key counts as 0) and returns the
  // sum.
  virtual int64_t add(std::string_view key, int64_t delta) = 0;

  // Atomically replaces the value of `key` with `desired` if it equals `expected` (an empty
  // `expected` matches a missing key). Returns the value stored afterwards; see the file comment.
  virtual std::string compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) = 0;

  // True iff every key exists. Does not wait.
  virtual bool check(std::span<const std::string> keys) = 0;

  // Returns once every key exists; throws StoreTimeoutError after `timeout`.
  virtual void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) = 0;
  void wait(std::span<const std::string> keys) { wait(keys, timeout()); }

  // Removes `key`; true iff it existed.
  virtual bool delete_key(std::string_view key) = 0;

  // ---- optional: a backend overrides these when it can do better (fewer round trips, one atomic
  // step); the defaults are built from the operations above, as gloo's Store does.

  // Number of keys in the whole store (PyTorch counts its internal "init/" key too). The default
  // throws StoreError: counting needs the backend.
  virtual int64_t num_keys();

  // get() of several keys (waits for all of them, up to timeout()). The default waits for them
  // all, then gets them one by one: one round trip each.
  virtual std::vector<std::string> multi_get(std::span<const std::string> keys);

  // set() of several pairs. REQUIRES: keys.size() == values.size(). The default sets them one by
  // one, so a reader may see some before the others.
  virtual void multi_set(std::span<const std::string> keys, std::span<const std::string> values);

  // Appends `value` to the bytes under `key`, creating it if missing; wakes waiters. The default
  // retries compare_set until no other writer came between its read and its write.
  virtual void append(std::string_view key, std::string_view value);

  // Deadline for get(), multi_get() and the one-argument wait().
  virtual std::chrono::milliseconds timeout() const = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;

  // Where the store is, for messages: "tcp://127.0.0.1:29500", "memory", "prefix/ on tcp://...".
  virtual std::string describe() const = 0;

  // Makes a call blocked in another thread (a long wait) fail promptly with StoreError; later
  // calls work again. Safe from any thread. Stores without blocking I/O need not do anything.
  virtual void interrupt() {}

  // Optional: keys that vanish unless refreshed (etcd leases). When supports_ttl(), set_with_ttl
  // stores `value` under `key` for `ttl`; calling it again for the same key refreshes the time.
  // Other stores throw StoreError.
  virtual bool supports_ttl() const { return false; }
  virtual void set_with_ttl(std::string_view key, std::string_view value,
                            std::chrono::milliseconds ttl) {
    (void)value;
    (void)ttl;
    throw StoreError("this store has no expiring keys", std::string(key), describe());
  }
};

}  // namespace cohort
