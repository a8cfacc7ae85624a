// StoreModel: a deliberately naive reference model of the store's semantics, for fuzz_server.
//
// Written from the protocol notes (docs/PROTOCOL.md §1.3), not from StoreState: plain
// maps and linear scans, so that it is obviously right and independent of the code under test.
// apply() executes one decoded request of one session and says what the server must do: the exact
// reply bytes, whether it parks, whether it must close the connection, and which parked sessions
// the request wakes (in the order they must be told).
//
// Thread safety: none.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cohort/rdzv/codec.h"

namespace cohort::rdzv::fuzz {

class StoreModel {
 public:
  struct Outcome {
    std::string reply;              // exact bytes sent now (nothing when parked)
    bool parks = false;             // WAIT with keys missing: the reply comes later
    bool closes = false;            // the server must close the connection
    std::vector<uint64_t> woken;    // parked sessions this request completes, in order
    bool cancelled_parked = false;  // CANCEL_WAIT found a parked wait
  };

  StoreModel(size_t max_waiters) : max_waiters_(max_waiters) {}

  // A 1.13 client sends again only once its WAIT timed out: any whole request of a legacy session
  // drops its parked wait, unanswered, whatever the request then does (a tagged retry included).
  // True when there was one.
  bool drop_dead_wait(uint64_t session, Dialect d) {
    return d == Dialect::kLegacy && waits_.erase(session) > 0;
  }

  Outcome apply(uint64_t session, Dialect d, const Request& req) {
    Outcome o;
    switch (req.op) {
      case Op::kValidate:
        o.closes = req.u32 != kValidationMagic;
        break;
      case Op::kPing:
        put_u32(&o.reply, req.u32);
        break;
      case Op::kSet:
        write(std::string(req.keys[0]), std::string(req.values[0]), &o);
        break;
      case Op::kGet: {
        auto it = data_.find(std::string(req.keys[0]));
        if (it == data_.end() && d == Dialect::kLegacy) {
          o.closes = true;  // 1.13's daemon throws on a missing key
        } else {
          put_bytes(&o.reply, it == data_.end() ? std::string() : it->second);
        }
        break;
      }
      case Op::kAdd: {
        std::string key(req.keys[0]);
        int64_t current = 0;
        auto it = data_.find(key);
        if (it != data_.end() && !stoll_like(it->second, &current)) {
          o.closes = true;
          break;
        }
        int64_t sum =
            static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(req.delta));
        write(key, std::to_string(sum), &o);
        put_i64(&o.reply, sum);
        break;
      }
      case Op::kCompareSet: {
        std::string key(req.keys[0]), expected(req.values[0]), desired(req.values[1]);
        auto it = data_.find(key);
        if (it == data_.end()) {
          if (!expected.empty()) {
            put_bytes(&o.reply, expected);  // PyTorch's quirk: no write, echo `expected`
          } else {
            write(key, desired, &o);
            put_bytes(&o.reply, desired);
          }
        } else if (it->second == expected) {
          write(key, desired, &o);
          put_bytes(&o.reply, desired);
        } else {
          put_bytes(&o.reply, it->second);
        }
        break;
      }
      case Op::kCheck: {
        bool all = true;
        for (auto k : req.keys) all = all && exists(std::string(k));
        put_u8(&o.reply, all ? kCheckReady : kCheckNotReady);
        break;
      }
      case Op::kWait: {
        std::vector<std::string> missing;
        for (auto k : req.keys)
          if (!exists(std::string(k))) missing.emplace_back(k);
        if (missing.empty()) {
          put_u8(&o.reply, kStopWaiting);
        } else if (max_waiters_ != 0 && waits_.size() >= max_waiters_) {
          o.closes = true;
        } else {
          waits_[session] = Wait{next_seq_++, std::move(missing)};
          o.parks = true;
        }
        break;
      }
      case Op::kCancelWait:
        o.cancelled_parked = waits_.erase(session) > 0;
        put_u8(&o.reply, kWaitCanceled);
        break;
      case Op::kGetNumKeys:
        put_i64(&o.reply, static_cast<int64_t>(data_.size()));
        break;
      case Op::kDeleteKey:
        put_i64(&o.reply, data_.erase(std::string(req.keys[0])) ? 1 : 0);
        break;
      case Op::kWatchKey:
        put_u8(&o.reply, kWatchRegistered);
        break;
      case Op::kAppend: {
        std::string key(req.keys[0]);
        auto it = data_.find(key);
        write(key, (it == data_.end() ? std::string() : it->second) + std::string(req.values[0]),
              &o);
        break;
      }
      case Op::kMultiGet:
        for (auto k : req.keys) {
          auto it = data_.find(std::string(k));
          if (it == data_.end() && d == Dialect::kLegacy) {
            o.closes = true;
            break;
          }
          put_bytes(&o.reply, it == data_.end() ? std::string() : it->second);
        }
        break;
      case Op::kMultiSet:
        for (size_t i = 0; i < req.keys.size(); ++i)
          write(std::string(req.keys[i]), std::string(req.values[i]), &o);
        break;
      case Op::kQueuePush: {
        std::string key(req.keys[0]);
        queues_[key].emplace_back(req.values[0]);
        feed_one(key, &o);
        break;
      }
      case Op::kQueuePop: {
        auto it = queues_.find(std::string(req.keys[0]));
        if (it == queues_.end() || it->second.empty()) {
          put_i64(&o.reply, 0);
        } else {
          put_i64(&o.reply, static_cast<int64_t>(it->second.size()));
          put_bytes(&o.reply, it->second.front());
          it->second.pop_front();
        }
        break;
      }
      case Op::kBarrier: {
        std::string key(req.keys[0]);
        int64_t current = 0;
        auto it = data_.find(key);
        if (it != data_.end() && !stoll_like(it->second, &current)) {
          o.closes = true;
          break;
        }
        // Wraps like ADD; parks while the counter is short of the world size.
        int64_t arrived = static_cast<int64_t>(static_cast<uint64_t>(current) + 1);
        bool parks = arrived < req.delta;
        if (parks && max_waiters_ != 0 && waits_.size() >= max_waiters_) {
          o.closes = true;
          break;
        }
        write(key, std::to_string(arrived), &o);
        if (parks) {
          waits_[session] = Wait{next_seq_++, {key}, req.delta};
          o.parks = true;
        } else {
          put_u8(&o.reply, kStopWaiting);
        }
        break;
      }
      case Op::kListKeys:
        put_i64(&o.reply, static_cast<int64_t>(data_.size()));
        for (const auto& [k, v] : data_) put_bytes(&o.reply, k);  // sorted, as cohortd sends them
        break;
      case Op::kQueueLen: {
        auto it = queues_.find(std::string(req.keys[0]));
        put_i64(&o.reply, it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size()));
        break;
      }
    }
    if (o.closes) o.reply.clear();
    return o;
  }

  // A tagged write (cohortd's retry extension): the reply remembered for (client, request) when
  // that was the client's last tagged request, else nullptr.
  const std::string* cached(uint64_t client, uint64_t request) const {
    auto it = replies_.find(client);
    return it != replies_.end() && it->second.first == request ? &it->second.second : nullptr;
  }
  void remember(uint64_t client, uint64_t request, std::string reply) {
    replies_[client] = {request, std::move(reply)};
  }

  // The session's connection closed.
  void drop(uint64_t session) { waits_.erase(session); }

  const std::map<std::string, std::string>& data() const { return data_; }

  bool parked(uint64_t session) const { return waits_.count(session) > 0; }
  size_t parked_count() const { return waits_.size(); }

 private:
  struct Wait {
    uint64_t seq;                      // arrival order
    std::vector<std::string> pending;  // one entry per registration still owed a write
    int64_t barrier = 0;               // a BARRIER: woken once its key counts this far
  };

  bool exists(const std::string& key) const {
    if (data_.count(key)) return true;
    auto q = queues_.find(key);
    return q != queues_.end() && !q->second.empty();
  }

  std::vector<uint64_t> by_arrival() const {
    std::vector<std::pair<uint64_t, uint64_t>> order;
    for (const auto& [s, w] : waits_) order.emplace_back(w.seq, s);
    std::sort(order.begin(), order.end());
    std::vector<uint64_t> out;
    for (auto& [seq, s] : order) out.push_back(s);
    return out;
  }

  // A write of `key` counts against every registration on it.
  void write(const std::string& key, std::string value, Outcome* o) {
    data_[key] = std::move(value);
    for (uint64_t s : by_arrival()) {
      Wait& w = waits_[s];
      int64_t count;
      if (w.barrier != 0 && !(stoll_like(data_[key], &count) && count >= w.barrier)) continue;
      std::erase(w.pending, key);
      if (w.pending.empty()) {
        waits_.erase(s);
        o->woken.push_back(s);
      }
    }
  }

  // A queue push counts against one registration: the earliest waiter's.
  void feed_one(const std::string& key, Outcome* o) {
    for (uint64_t s : by_arrival()) {
      Wait& w = waits_[s];
      auto it = std::find(w.pending.begin(), w.pending.end(), key);
      if (it == w.pending.end() || w.barrier != 0) continue;  // a queue is not a counter
      w.pending.erase(it);
      if (w.pending.empty()) {
        waits_.erase(s);
        o->woken.push_back(s);
      }
      return;
    }
  }

  // std::stoll as PyTorch calls it: leading whitespace, a sign, digits, the rest ignored; no
  // digits or out of range fails.
  static bool stoll_like(const std::string& s, int64_t* out) {
    const char* begin = s.c_str();
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(begin, &end, 10);
    if (end == begin || errno == ERANGE) return false;
    *out = v;
    return true;
  }

  size_t max_waiters_;
  std::map<std::string, std::string> data_;
  std::map<std::string, std::deque<std::string>> queues_;
  std::map<uint64_t, Wait> waits_;
  std::map<uint64_t, std::pair<uint64_t, std::string>> replies_;  // client -> (request, reply)
  uint64_t next_seq_ = 1;
};

}  // namespace cohort::rdzv::fuzz
