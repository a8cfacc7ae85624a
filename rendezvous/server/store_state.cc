#include "server/store_state.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "cohort/rdzv/codec.h"

namespace cohort::rdzv {
namespace {

// std::stoll's rules, without exceptions: leading whitespace, an optional sign, at least one
// digit, trailing bytes ignored; out of range fails.
bool parse_like_stoll(std::string_view s, int64_t* out) {
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  uint64_t v = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
    uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (limit - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

}  // namespace

StoreState::StoreState(StoreListener* listener, size_t max_waiters)
    : listener_(listener), max_waiters_(max_waiters) {}

StringMap<StoredValue>::iterator StoreState::insert_key(std::string_view key,
                                                        std::string_view value) {
  key_value_bytes_ += key.size() + value.size();
  return data_.emplace(std::string(key), StoredValue(value)).first;
}

void StoreState::replace_value(StringMap<StoredValue>::iterator it, std::string_view value) {
  key_value_bytes_ = key_value_bytes_ - it->second.size() + value.size();
  it->second.assign(value);
}

void StoreState::erase_key(StringMap<StoredValue>::iterator it) {
  key_value_bytes_ -= it->first.size() + it->second.size();
  data_.erase(it);
}

bool StoreState::exists(std::string_view key) const {
  if (data_.find(key) != data_.end()) return true;
  auto q =
      queues_.find(key);  // a non-empty queue satisfies CHECK and WAIT, as in PyTorch's libuv store
  return q != queues_.end() && !q->second.empty();
}

void StoreState::set(std::string_view key, std::string_view value) {
  Hold hold(this);
  auto it = data_.find(key);
  if (it == data_.end()) {
    insert_key(key, value);
    notify_watchers(key, kWatchCreated, {}, value);
  } else {
    std::string old = watchers_by_key_.empty() ? std::string() : it->second.str();
    replace_value(it, value);
    notify_watchers(key, kWatchUpdated, old, value);
  }
  changed(key);
  wake(key);
}

const std::string* StoreState::get(std::string_view key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second.str();
}

const StoredValue* StoreState::value(std::string_view key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

bool StoreState::add(std::string_view key, int64_t delta, int64_t* result) {
  Hold hold(this);
  auto it = data_.find(key);
  int64_t current = 0;
  if (it != data_.end() && !parse_like_stoll(it->second.view(), &current)) return false;
  // Wraps on overflow (PyTorch's signed overflow is undefined; we pick the defined wrap).
  int64_t sum = static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));
  std::string text = std::to_string(sum);
  if (it == data_.end()) {
    insert_key(key, text);
    notify_watchers(key, kWatchCreated, {}, text);
  } else {
    std::string old = watchers_by_key_.empty() ? std::string() : it->second.str();
    replace_value(it, text);
    notify_watchers(key, kWatchUpdated, old, text);
  }
  *result = sum;
  changed(key);
  wake(key);
  return true;
}

std::string StoreState::compare_set(std::string_view key, std::string_view expected,
                                    std::string_view desired) {
  Hold hold(this);
  auto it = data_.find(key);
  if (it == data_.end()) {
    // PyTorch's quirk: a missing key with a non-empty `expected` is not written, and the reply
    // echoes `expected`.
    if (!expected.empty()) return std::string(expected);
    insert_key(key, desired);
    notify_watchers(key, kWatchCreated, {}, desired);
  } else if (it->second.view() == expected) {
    std::string old = watchers_by_key_.empty() ? std::string() : it->second.str();
    replace_value(it, desired);
    notify_watchers(key, kWatchUpdated, old, desired);
  } else {
    return it->second.str();
  }
  changed(key);
  // PyTorch 1.13's daemon does not wake waiters here (its libuv daemon does). A written key is a
  // written key: we wake them, which no client can observe as anything but a faster rendezvous.
  wake(key);
  return std::string(desired);
}

bool StoreState::check(std::span<const std::string_view> keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](std::string_view k) { return exists(k); });
}

bool StoreState::delete_key(std::string_view key) {
  Hold hold(this);
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  std::string old = watchers_by_key_.empty() ? std::string() : it->second.str();
  erase_key(it);
  notify_watchers(key, kWatchDeleted, old, {});
  if (journal_) journal_->on_change(key, nullptr);
  return true;
}

void StoreState::append(std::string_view key, std::string_view value) {
  Hold hold(this);
  auto it = data_.find(key);
  if (it == data_.end()) {
    it = insert_key(key, value);
    notify_watchers(key, kWatchCreated, {}, value);
  } else {
    std::string old = watchers_by_key_.empty() ? std::string() : it->second.str();
    key_value_bytes_ += value.size();
    it->second.append(value);
    notify_watchers(key, kWatchUpdated, old, it->second.view());
  }
  if (journal_) journal_->on_append(key, value, it->second.str());
  wake(key);
}

void StoreState::restore(std::string_view key, std::string_view value) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    insert_key(key, value);
  } else {
    replace_value(it, value);
  }
}

void StoreState::restore_append(std::string_view key, std::string_view suffix) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    insert_key(key, suffix);
  } else {
    key_value_bytes_ += suffix.size();
    it->second.append(suffix);
  }
}

std::string StoreState::share_key(uint64_t scope, std::string_view key) {
  std::string out(reinterpret_cast<const char*>(&scope), sizeof(scope));
  out.append(key);
  return out;
}

StoreState::WaitResult StoreState::wait(SessionId session, std::span<const std::string_view> keys,
                                        uint64_t share_scope) {
  const bool shareable = share_scope != 0 && keys.size() == 1;
  std::string scope_key;
  if (shareable) {
    scope_key = share_key(share_scope, keys[0]);
    if (auto it = shared_by_key_.find(scope_key); it != shared_by_key_.end()) {
      shared_[it->second].members.push_back(session);
      share_of_.emplace(session, it->second);
      return WaitResult::kParked;
    }
  }
  PendingWait w{next_wait_seq_++, 0, {}};
  for (std::string_view k : keys) {
    if (exists(k)) continue;
    w.keys.emplace_back(k);
  }
  if (w.keys.empty()) return WaitResult::kReady;
  if (max_waiters_ != 0 && waits_.size() >= max_waiters_) return WaitResult::kTooManyWaiters;
  // A key listed twice is registered twice and counted twice, as PyTorch does.
  w.remaining = w.keys.size();
  SessionId parked = session;
  if (shareable) {
    parked = next_shared_++;
    shared_by_key_.emplace(scope_key, parked);
    shared_.emplace(parked, SharedWait{std::move(scope_key), {session}});
    share_of_.emplace(session, parked);
  }
  for (const auto& k : w.keys) {
    auto it = waiters_by_key_.find(k);
    if (it == waiters_by_key_.end()) it = waiters_by_key_.emplace(k, KeyWaiters{}).first;
    it->second.list.emplace_back(parked, w.seq);
  }
  waits_.insert_or_assign(parked, std::move(w));
  return WaitResult::kParked;
}

std::vector<SessionId> StoreState::dissolve(SessionId id) {
  auto it = shared_.find(id);
  if (it == shared_.end()) return {};
  std::vector<SessionId> members = std::move(it->second.members);
  shared_by_key_.erase(it->second.scope_key);
  shared_.erase(it);
  for (SessionId m : members) share_of_.erase(m);
  return members;
}

StoreState::WaitResult StoreState::barrier(SessionId session, std::string_view key,
                                           int64_t world_size) {
  // Refused before anything changes: a request that closes its connection leaves no trace.
  int64_t current = 0;
  auto found = data_.find(key);
  if (found != data_.end() && !parse_like_stoll(found->second.view(), &current))
    return WaitResult::kNotACounter;
  // The counter after this arrival, wrapped as ADD wraps it (PyTorch compares after its add).
  const int64_t after = static_cast<int64_t>(static_cast<uint64_t>(current) + 1);
  const bool parks = after < world_size;
  if (parks && max_waiters_ != 0 && waits_.size() >= max_waiters_)
    return WaitResult::kTooManyWaiters;
  int64_t arrived;
  add(key, 1, &arrived);
  if (!parks) return WaitResult::kReady;
  PendingWait w{next_wait_seq_++, 1, {std::string(key)}, world_size};
  auto it = waiters_by_key_.find(key);
  if (it == waiters_by_key_.end()) it = waiters_by_key_.emplace(key, KeyWaiters{}).first;
  it->second.list.emplace_back(session, w.seq);
  waits_.insert_or_assign(session, std::move(w));
  return WaitResult::kParked;
}

bool StoreState::counter_reached(std::string_view key, int64_t target) const {
  auto it = data_.find(key);
  int64_t v;
  return it != data_.end() && parse_like_stoll(it->second.view(), &v) && v >= target;
}

void StoreState::unregister(SessionId session, const PendingWait& w) {
  for (const auto& k : w.keys) {
    auto it = waiters_by_key_.find(k);
    if (it == waiters_by_key_.end()) continue;
    auto& kw = it->second;
    // Short lists are cleaned at once; long ones (a storm of waiters on one key) lazily, so that
    // many cancellations cost linear rather than quadratic time.
    if (kw.list.size() <= 64) {
      std::erase_if(kw.list,
                    [&](const auto& e) { return e.first == session && e.second == w.seq; });
    } else if (++kw.stale > kw.list.size() / 2) {
      std::erase_if(kw.list, [&](const auto& e) {
        auto wi = waits_.find(e.first);
        return wi == waits_.end() || wi->second.seq != e.second ||
               (e.first == session && e.second == w.seq);
      });
      kw.stale = 0;
    }
    if (kw.list.empty()) waiters_by_key_.erase(it);
  }
}

bool StoreState::cancel_wait(SessionId session) {
  if (auto share = share_of_.find(session); share != share_of_.end()) {
    const SessionId id = share->second;
    share_of_.erase(share);
    auto& members = shared_.at(id).members;
    std::erase(members, session);
    if (!members.empty()) return true;
    dissolve(id);
    session = id;  // the last member out cancels the shared wait itself
  }
  auto it = waits_.find(session);
  if (it == waits_.end()) return false;
  PendingWait w = std::move(it->second);
  waits_.erase(it);
  unregister(session, w);
  return true;
}

void StoreState::wake(std::string_view key, bool only_one) {
  auto it = waiters_by_key_.find(key);
  if (it == waiters_by_key_.end()) return;
  std::vector<SessionId> satisfied;
  auto& list = it->second.list;
  size_t kept = 0;  // barriers whose counter is still short stay, in arrival order, at the front
  size_t i = 0;
  for (; i < list.size(); ++i) {
    auto [session, seq] = list[i];
    auto wi = waits_.find(session);
    if (wi == waits_.end() || wi->second.seq != seq) continue;  // cancelled
    const int64_t target = wi->second.barrier_target;
    if (target != 0 && !counter_reached(key, target)) {
      list[kept++] = list[i];
      continue;
    }
    if (only_one && (session & kSharedBit) != 0) {
      // A queue push feeds one pop: one member goes, the others stay parked on the key.
      auto& members = shared_.at(session).members;
      if (members.size() > 1) {
        const SessionId first = members.front();
        members.erase(members.begin());
        share_of_.erase(first);
        satisfied.push_back(first);
        list[kept++] = list[i];
        ++i;
        break;
      }
    }
    if (--wi->second.remaining == 0) {
      waits_.erase(wi);
      if ((session & kSharedBit) != 0) {
        for (SessionId member : dissolve(session)) satisfied.push_back(member);
      } else {
        satisfied.push_back(session);
      }
    }
    if (only_one) {
      ++i;
      break;
    }
  }
  list.erase(list.begin() + static_cast<ptrdiff_t>(kept), list.begin() + static_cast<ptrdiff_t>(i));
  if (list.empty()) waiters_by_key_.erase(it);
  // Told after the bookkeeping, so a listener may call back into the state.
  for (SessionId s : satisfied) emit_wake(s);
}

void StoreState::emit_wake(SessionId s) {
  if (hold_depth_ > 0) {
    held_.push_back({s, true, 0, {}, {}, {}});
  } else {
    listener_->on_wait_satisfied(s);
  }
}

void StoreState::emit_watch(SessionId s, const WatchEvent& event) {
  if (hold_depth_ > 0) {
    held_.push_back({s, false, event.type, std::string(event.key), std::string(event.old_value),
                     std::string(event.new_value)});
  } else {
    listener_->on_watch_event(s, event);
  }
}

void StoreState::release() {
  if (--hold_depth_ > 0 || held_.empty()) return;
  // Moved out first: a listener may call back into the state, which holds and releases anew.
  std::vector<HeldEvent> events = std::move(held_);
  held_.clear();
  for (const HeldEvent& e : events) {
    if (e.wake) {
      listener_->on_wait_satisfied(e.session);
    } else {
      listener_->on_watch_event(e.session, {e.type, e.key, e.old_value, e.new_value});
    }
  }
}

void StoreState::watch(SessionId session, std::string_view key) {
  auto it = watchers_by_key_.find(key);
  if (it == watchers_by_key_.end())
    it = watchers_by_key_.emplace(key, std::vector<SessionId>{}).first;
  it->second.push_back(session);
  watched_keys_[session].emplace_back(key);
}

void StoreState::notify_watchers(std::string_view key, uint8_t type, std::string_view old_value,
                                 std::string_view new_value) {
  if (watchers_by_key_.empty()) return;
  auto it = watchers_by_key_.find(key);
  if (it == watchers_by_key_.end()) return;
  const WatchEvent event{type, key, old_value, new_value};
  for (SessionId s : it->second) emit_watch(s, event);
}

void StoreState::queue_push(std::string_view key, std::string_view value) {
  Hold hold(this);
  auto it = queues_.find(key);
  if (it == queues_.end()) {
    it = queues_.emplace(key, std::deque<std::string>{}).first;
    queued_bytes_ += key.size();
  }
  it->second.emplace_back(value);
  queued_bytes_ += value.size();
  wake(key, /*only_one=*/true);
}

int64_t StoreState::queue_pop(std::string_view key, std::string* value) {
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) return 0;
  int64_t len = static_cast<int64_t>(it->second.size());
  *value = std::move(it->second.front());
  it->second.pop_front();
  queued_bytes_ -= value->size();
  if (it->second.empty()) {
    queued_bytes_ -= it->first.size();
    queues_.erase(it);
  }
  return len;
}

int64_t StoreState::queue_len(std::string_view key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

void StoreState::drop_session(SessionId session) {
  cancel_wait(session);
  auto it = watched_keys_.find(session);
  if (it == watched_keys_.end()) return;
  for (const auto& k : it->second) {
    auto w = watchers_by_key_.find(k);
    if (w == watchers_by_key_.end()) continue;
    std::erase(w->second, session);
    if (w->second.empty()) watchers_by_key_.erase(w);
  }
  watched_keys_.erase(it);
}

void StoreState::changed(std::string_view key) {
  if (!journal_) return;
  auto it = data_.find(key);
  journal_->on_change(key, it == data_.end() ? nullptr : &it->second.str());
}

void StoreState::restore_delete(std::string_view key) {
  auto it = data_.find(key);
  if (it != data_.end()) erase_key(it);
}

const std::string* StoreState::cached_reply(uint64_t client, uint64_t request) const {
  auto it = replies_.find(client);
  if (it == replies_.end() || it->second.request != request) return nullptr;
  return &it->second.reply;
}

void StoreState::remember_reply(uint64_t client, uint64_t request, std::string reply) {
  constexpr size_t kMaxClients = 100000;
  if (journal_) journal_->on_reply(client, request, reply);
  reply_bytes_ += reply.size();
  auto found = replies_.find(client);
  if (found != replies_.end()) {
    reply_bytes_ -= found->second.reply.size();
    found->second = CachedReply{request, std::move(reply)};
    return;
  }
  replies_.emplace(client, CachedReply{request, std::move(reply)});
  reply_order_.push_back(client);
  while (replies_.size() > kMaxClients) {
    auto oldest = replies_.find(reply_order_.front());
    reply_bytes_ -= oldest->second.reply.size();
    replies_.erase(oldest);
    reply_order_.pop_front();
  }
}

void StoreState::for_each_reply(
    const std::function<void(uint64_t, uint64_t, const std::string&)>& fn) const {
  for (const auto& [client, r] : replies_) fn(client, r.request, r.reply);
}

void StoreState::for_each(
    const std::function<void(const std::string&, const std::string&)>& fn) const {
  for (const auto& [k, v] : data_) fn(k, v.str());
}

}  // namespace cohort::rdzv
