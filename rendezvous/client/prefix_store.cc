#include "cohort/rdzv/prefix_store.h"

namespace cohort {

PrefixStore::PrefixStore(std::string prefix, Store& base)
    : prefix_(std::move(prefix)), base_(base) {}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), owned_(std::move(base)), base_(*owned_) {}

std::string PrefixStore::full(std::string_view key) const {
  std::string k;
  k.reserve(prefix_.size() + 1 + key.size());
  k.append(prefix_).append("/").append(key);
  return k;
}

std::vector<std::string> PrefixStore::full(std::span<const std::string> keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(std::string_view key, std::string_view value) {
  base_.set(full(key), value);
}
std::string PrefixStore::get(std::string_view key) {
  return base_.get(full(key));
}
int64_t PrefixStore::add(std::string_view key, int64_t delta) {
  return base_.add(full(key), delta);
}
std::string PrefixStore::compare_set(std::string_view key, std::string_view expected,
                                     std::string_view desired) {
  return base_.compare_set(full(key), expected, desired);
}
bool PrefixStore::check(std::span<const std::string> keys) {
  return base_.check(full(keys));
}
void PrefixStore::wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  base_.wait(full(keys), timeout);
}
bool PrefixStore::delete_key(std::string_view key) {
  return base_.delete_key(full(key));
}
int64_t PrefixStore::num_keys() {
  return base_.num_keys();
}
std::vector<std::string> PrefixStore::multi_get(std::span<const std::string> keys) {
  return base_.multi_get(full(keys));
}
void PrefixStore::multi_set(std::span<const std::string> keys,
                            std::span<const std::string> values) {
  base_.multi_set(full(keys), values);
}
void PrefixStore::append(std::string_view key, std::string_view value) {
  base_.append(full(key), value);
}
std::chrono::milliseconds PrefixStore::timeout() const {
  return base_.timeout();
}
void PrefixStore::set_timeout(std::chrono::milliseconds timeout) {
  base_.set_timeout(timeout);
}
std::string PrefixStore::describe() const {
  return prefix_ + "/ on " + base_.describe();
}

}  // namespace cohort
