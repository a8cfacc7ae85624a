#include "cohort/rdzv/memory_store.h"

#include <charconv>

namespace cohort {

MemoryStore::MemoryStore(std::chrono::milliseconds timeout, Clock& clock)
    : clock_(clock), timeout_(timeout) {
  if (!clock_.is_real()) {
    waker_ = clock_.add_waker([this] {
      std::lock_guard lock(mu_);  // so that a waiter between its check and its wait sees it
      changed_.notify_all();
    });
  }
}

MemoryStore::~MemoryStore() {
  if (waker_ != 0) clock_.remove_waker(waker_);
}

void MemoryStore::set(std::string_view key, std::string_view value) {
  {
    std::lock_guard lock(mu_);
    data_.insert_or_assign(std::string(key), std::string(value));
  }
  changed_.notify_all();
}

std::string MemoryStore::get(std::string_view key) {
  std::unique_lock lock(mu_);
  std::string k(key);
  wait_locked(lock, std::span<const std::string>(&k, 1), timeout_);
  return data_.find(k)->second;
}

int64_t MemoryStore::add(std::string_view key, int64_t delta) {
  int64_t sum;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(key);
    int64_t current = 0;
    if (it != data_.end()) {
      const std::string& v = it->second;
      size_t start = v.find_first_not_of(' ');
      if (start == std::string::npos ||
          std::from_chars(v.data() + start, v.data() + v.size(), current).ec != std::errc()) {
        throw StoreError("add on a key whose value is not a decimal integer", std::string(key),
                         "memory");
      }
    }
    sum = current + delta;
    data_.insert_or_assign(std::string(key), std::to_string(sum));
  }
  changed_.notify_all();
  return sum;
}

std::string MemoryStore::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired) {
  std::string result;
  bool wrote = false;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty()) return std::string(expected);
      data_.emplace(std::string(key), std::string(desired));
      result = desired;
      wrote = true;
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
      wrote = true;
    } else {
      result = it->second;
    }
  }
  if (wrote) changed_.notify_all();
  return result;
}

bool MemoryStore::check(std::span<const std::string> keys) {
  std::lock_guard lock(mu_);
  for (const auto& k : keys)
    if (!data_.contains(k)) return false;
  return true;
}

void MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock, std::span<const std::string> keys,
                              std::chrono::milliseconds timeout, const uint64_t* own,
                              const std::atomic<bool>* abandon) {
  auto all_present = [&] {
    for (const auto& k : keys)
      if (!data_.contains(k)) return false;
    return true;
  };
  const uint64_t interrupts = interrupts_;
  const uint64_t own_interrupts = own ? *own : 0;
  auto interrupted = [&] {
    return interrupts_ != interrupts || (own && *own != own_interrupts) || (abandon && *abandon);
  };
  auto done = [&] { return all_present() || interrupted(); };
  if (clock_.is_real()) {
    changed_.wait_for(lock, timeout, done);
  } else {
    // Time moves only when the clock advances, which wakes this wait.
    const auto deadline = clock_.now() + timeout;
    changed_.wait(lock, [&] { return done() || clock_.now() >= deadline; });
  }
  if (interrupted() && !all_present())
    throw StoreError("wait interrupted", keys.empty() ? "" : keys[0], "memory");
  const bool present = all_present();
  if (!present) {
    std::string missing;
    for (const auto& k : keys)
      if (!data_.contains(k)) missing += (missing.empty() ? "" : ", ") + k;
    throw StoreTimeoutError(
        "wait timed out after " + std::to_string(timeout.count()) + " ms; keys not set: " + missing,
        missing, "memory");
  }
}

void MemoryStore::wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  wait_locked(lock, keys, timeout);
}

bool MemoryStore::delete_key(std::string_view key) {
  std::lock_guard lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  data_.erase(it);
  return true;
}

int64_t MemoryStore::num_keys() {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(data_.size());
}

std::vector<std::string> MemoryStore::multi_get(std::span<const std::string> keys) {
  std::unique_lock lock(mu_);
  wait_locked(lock, keys, timeout_);
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(data_.find(k)->second);
  return out;
}

void MemoryStore::multi_set(std::span<const std::string> keys,
                            std::span<const std::string> values) {
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) data_.insert_or_assign(keys[i], values[i]);
  }
  changed_.notify_all();
}

void MemoryStore::append(std::string_view key, std::string_view value) {
  {
    std::lock_guard lock(mu_);
    data_[std::string(key)].append(value);
  }
  changed_.notify_all();
}

void MemoryStore::interrupt() {
  {
    std::lock_guard lock(mu_);
    ++interrupts_;
  }
  changed_.notify_all();
}

std::chrono::milliseconds MemoryStore::timeout() const {
  std::lock_guard lock(mu_);
  return timeout_;
}

void MemoryStore::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  timeout_ = timeout;
}

// Forwards to the store; waits made here also end on this view's own interrupt().
class MemoryStore::Connection final : public Store {
 public:
  Connection(MemoryStore& s, const std::atomic<bool>* abandon) : s_(s), abandon_(abandon) {}
  void set(std::string_view k, std::string_view v) override { s_.set(k, v); }
  std::string get(std::string_view key) override {
    std::unique_lock lock(s_.mu_);
    std::string k(key);
    s_.wait_locked(lock, std::span<const std::string>(&k, 1), s_.timeout_, &interrupts_, abandon_);
    return s_.data_.find(k)->second;
  }
  int64_t add(std::string_view k, int64_t d) override { return s_.add(k, d); }
  std::string compare_set(std::string_view k, std::string_view e, std::string_view d) override {
    return s_.compare_set(k, e, d);
  }
  bool check(std::span<const std::string> keys) override { return s_.check(keys); }
  using Store::wait;
  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(s_.mu_);
    s_.wait_locked(lock, keys, timeout, &interrupts_, abandon_);
  }
  bool delete_key(std::string_view k) override { return s_.delete_key(k); }
  int64_t num_keys() override { return s_.num_keys(); }
  std::vector<std::string> multi_get(std::span<const std::string> keys) override {
    std::unique_lock lock(s_.mu_);
    s_.wait_locked(lock, keys, s_.timeout_, &interrupts_, abandon_);
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(s_.data_.find(k)->second);
    return out;
  }
  void multi_set(std::span<const std::string> k, std::span<const std::string> v) override {
    s_.multi_set(k, v);
  }
  void append(std::string_view k, std::string_view v) override { s_.append(k, v); }
  std::chrono::milliseconds timeout() const override { return s_.timeout(); }
  void set_timeout(std::chrono::milliseconds t) override { s_.set_timeout(t); }
  std::string describe() const override { return "memory"; }
  void interrupt() override {
    {
      std::lock_guard lock(s_.mu_);
      ++interrupts_;
    }
    s_.changed_.notify_all();
  }

 private:
  MemoryStore& s_;
  const std::atomic<bool>* abandon_;
  uint64_t interrupts_ = 0;  // guarded by s_.mu_
};

std::unique_ptr<Store> MemoryStore::connect(const std::atomic<bool>* abandon) {
  return std::make_unique<Connection>(*this, abandon);
}

}  // namespace cohort
