// StoreState: the keys, counters, queues, waiters and watchers of one store server.
//
// Pure logic: no sockets, no clock. Sessions are named by SessionId; when a write satisfies a
// parked WAIT or changes a watched key, the state tells its StoreListener, which owns delivery.
// Semantics are PyTorch's TCPStore's (docs/PROTOCOL.md §1.3), quirks included.
//
// Thread safety: none; the server touches it from its one event-loop thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/stored_value.h"

namespace cohort::rdzv {

using SessionId = uint64_t;

// A change to a key that a 1.13 WATCH_KEY watches: kWatchCreated, kWatchUpdated or kWatchDeleted
// (codec.h), the key, its old and its new value. Its wire form is the protocol handler's business
// (encode_watch_notification, protocol_handler.h); the views are valid during the call only.
struct WatchEvent {
  uint8_t type;
  std::string_view key, old_value, new_value;
};

class StoreListener {
 public:
  virtual ~StoreListener() = default;
  // Every key `session` waited for now exists: it must be sent STOP_WAITING.
  virtual void on_wait_satisfied(SessionId session) = 0;
  // A key `session` watches (1.13 WATCH_KEY) changed.
  virtual void on_watch_event(SessionId session, const WatchEvent& event) = 0;
};

// Heterogeneous lookup, so string_views from the codec need no copies.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class StoreState {
 public:
  // `listener` must outlive the state. `max_waiters` bounds parked WAITs (0 = unbounded).
  StoreState(StoreListener* listener, size_t max_waiters);

  void set(std::string_view key, std::string_view value);
  // nullptr when missing.
  const std::string* get(std::string_view key) const;
  // The same, as stored: a large value's buffer can be shared with a reply (stored_value.h).
  const StoredValue* value(std::string_view key) const;
  // False (nothing changed) when the existing value is not a decimal integer (std::stoll rules).
  bool add(std::string_view key, int64_t delta, int64_t* result);
  // Returns the value the reply carries (see cohort::Store::compare_set).
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired);
  bool check(std::span<const std::string_view> keys) const;
  bool delete_key(std::string_view key);
  int64_t num_keys() const { return static_cast<int64_t>(data_.size()); }
  // Bytes of every key and value, and of every queued item (with its queue's key), kept as they
  // change: a metrics scrape and a compaction check read them without visiting the keys (a
  // scrape summed a million keys on the loop: 128 ms, issue 27).
  uint64_t key_value_bytes() const { return key_value_bytes_; }
  uint64_t queued_bytes() const { return queued_bytes_; }
  // The remembered replies of tagged writes: how many, and their bytes.
  size_t num_replies() const { return replies_.size(); }
  uint64_t reply_bytes() const { return reply_bytes_; }
  void append(std::string_view key, std::string_view value);

  enum class WaitResult { kReady, kParked, kTooManyWaiters, kNotACounter };
  // REQUIRES: `session` has no wait parked (a session waits for one thing at a time).
  // `share_scope` non-zero (the channels of one relay link, docs/RELAY.md §2): a one-key wait
  // joins the parked wait of another session with the same scope on the same key, and they are
  // woken together. Exact: a wait parked on a key has seen no write of it since, so the key is
  // still missing and a wait of its own would park on just that key. A QUEUE_PUSH, which wakes
  // one waiter, wakes one member. Joining is not one more parked wait (--max-waiters).
  WaitResult wait(SessionId session, std::span<const std::string_view> keys,
                  uint64_t share_scope = 0);
  // Forgets the parked wait of `session` (its share of a shared one); true iff there was one.
  bool cancel_wait(SessionId session);
  // PyTorch 2.x's BARRIER: ADDs 1 to `key`; ready once the counter is at least `world_size`,
  // else parked until a write (another arrival, an ADD, a SET) makes it so. An arrival stays
  // counted when its wait is cancelled, as in PyTorch's libuv store. Nothing changes when the
  // key holds something that is not a decimal integer (kNotACounter) or the arrival would park
  // one wait too many (kTooManyWaiters).
  // REQUIRES: `session` has no wait parked.
  WaitResult barrier(SessionId session, std::string_view key, int64_t world_size);
  // Calls fn(key) for every key (LIST_KEYS; queues are not keys), in no particular order.
  template <class Fn>
  void for_each_key(Fn&& fn) const {
    for (const auto& entry : data_) fn(std::string_view(entry.first));
  }

  void watch(SessionId session, std::string_view key);

  void queue_push(std::string_view key, std::string_view value);
  // Pops the front of the queue into *value; returns the length before the pop (0: nothing).
  int64_t queue_pop(std::string_view key, std::string* value);
  int64_t queue_len(std::string_view key) const;

  // A session went away: drop its wait and watches.
  void drop_session(SessionId session);

  // Parked waits; a shared wait counts once.
  size_t parked_waits() const { return waits_.size(); }
  // Sessions whose wait is a share of another's (see wait()).
  size_t sharing_waits() const { return share_of_.size(); }

  // Visits every key and value (for snapshots).
  void for_each(const std::function<void(const std::string&, const std::string&)>& fn) const;

  // The store's log (store_log.h): told every change of a key (the new value, or nullptr when
  // deleted) and every remembered reply, grouped in batches that must persist all or nothing.
  // Queues are not journaled: they do not persist.
  class Journal {
   public:
    virtual ~Journal() = default;
    virtual void on_change(std::string_view key, const std::string* value) = 0;
    // APPEND added `suffix` to `key`, whose value is now `value`: a journal may record the delta.
    virtual void on_append(std::string_view key, std::string_view suffix,
                           const std::string& value) {
      (void)suffix;
      on_change(key, &value);
    }
    virtual void on_reply(uint64_t client, uint64_t request, const std::string& reply) = 0;
    virtual void begin_batch() = 0;
    virtual void end_batch() = 0;
  };
  // `journal` must outlive the state (nullptr: none).
  void set_journal(Journal* journal) { journal_ = journal; }
  // Until the outermost end_batch(), woken waits and watch notifications are held: a client is
  // told of a change only once the journal has it (written, and with --fsync always synced), so
  // no client acts on a write that a crash then loses.
  void begin_batch() {
    ++hold_depth_;
    if (journal_) journal_->begin_batch();
  }
  void end_batch() {
    if (journal_) journal_->end_batch();
    release();
  }

  // Replies to tagged requests (cohortd's extension for safe retries): the last reply per client.
  // nullptr unless `request` is that client's last request.
  const std::string* cached_reply(uint64_t client, uint64_t request) const;
  void remember_reply(uint64_t client, uint64_t request, std::string reply);
  void for_each_reply(
      const std::function<void(uint64_t client, uint64_t request, const std::string&)>& fn) const;

  // Restores a key without waking or notifying anyone (loading a log).
  void restore(std::string_view key, std::string_view value);
  void restore_delete(std::string_view key);
  // Restores an APPEND (creating the key when missing), without waking or notifying anyone.
  void restore_append(std::string_view key, std::string_view suffix);

 private:
  struct PendingWait {
    uint64_t seq;
    size_t remaining;
    std::vector<std::string> keys;  // the keys this wait is registered on
    int64_t barrier_target = 0;     // a BARRIER: ready when its key's counter reaches this
  };
  struct KeyWaiters {
    std::vector<std::pair<SessionId, uint64_t>> list;  // (session, wait seq), arrival order
    size_t stale = 0;  // entries whose wait was cancelled; compacted lazily
  };

  bool exists(std::string_view key) const;
  // True when `key` holds a decimal integer of at least `target`.
  bool counter_reached(std::string_view key, int64_t target) const;
  // Tells the change observer the key's current value.
  void changed(std::string_view key);
  // Counts the write of `key` against the waits parked on it; `only_one` wakes a single waiter
  // (a queue push feeds one pop).
  void wake(std::string_view key, bool only_one = false);
  void notify_watchers(std::string_view key, uint8_t type, std::string_view old_value,
                       std::string_view new_value);
  void unregister(SessionId session, const PendingWait& w);

  // Holds listener calls for the duration of a change, after its journal entry (see
  // begin_batch()); each mutating operation takes one.
  struct Hold {
    explicit Hold(StoreState* s) : s_(s) { ++s_->hold_depth_; }
    ~Hold() { s_->release(); }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    StoreState* s_;
  };
  struct HeldEvent {
    SessionId session;
    bool wake;  // on_wait_satisfied; else on_watch_event with the rest
    uint8_t type = 0;
    std::string key, old_value, new_value;
  };
  // A shared wait (wait()'s share_scope) is parked under an id of its own, with this bit set.
  static constexpr SessionId kSharedBit = SessionId{1} << 63;
  struct SharedWait {
    std::string scope_key;           // share_key() of its scope and key
    std::vector<SessionId> members;  // arrival order
  };
  static std::string share_key(uint64_t scope, std::string_view key);
  // Removes shared wait `id` from the indexes; returns its members.
  std::vector<SessionId> dissolve(SessionId id);
  void emit_wake(SessionId s);
  void emit_watch(SessionId s, const WatchEvent& event);
  // Ends one hold; the outermost tells the listener what was held, in order.
  void release();

  StoreListener* listener_;
  int hold_depth_ = 0;
  std::vector<HeldEvent> held_;
  size_t max_waiters_;
  // Inserts `key` (absent) with `value`, counting its bytes.
  StringMap<StoredValue>::iterator insert_key(std::string_view key, std::string_view value);
  // Replaces an existing key's value, counting the change in bytes.
  void replace_value(StringMap<StoredValue>::iterator it, std::string_view value);
  void erase_key(StringMap<StoredValue>::iterator it);

  StringMap<StoredValue> data_;
  StringMap<std::deque<std::string>> queues_;
  uint64_t key_value_bytes_ = 0;
  uint64_t queued_bytes_ = 0;
  uint64_t reply_bytes_ = 0;
  std::unordered_map<SessionId, PendingWait> waits_;
  StringMap<KeyWaiters> waiters_by_key_;
  StringMap<std::vector<SessionId>> watchers_by_key_;
  std::unordered_map<SessionId, std::vector<std::string>> watched_keys_;
  uint64_t next_wait_seq_ = 1;
  std::unordered_map<SessionId, SharedWait> shared_;   // by its kSharedBit id
  StringMap<SessionId> shared_by_key_;                 // share_key() -> its id
  std::unordered_map<SessionId, SessionId> share_of_;  // member session -> shared wait
  SessionId next_shared_ = kSharedBit | 1;
  Journal* journal_ = nullptr;
  struct CachedReply {
    uint64_t request;
    std::string reply;
  };
  std::unordered_map<uint64_t, CachedReply> replies_;
  std::deque<uint64_t> reply_order_;  // clients in first-seen order, to bound replies_
};

}  // namespace cohort::rdzv
