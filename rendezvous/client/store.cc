#include "cohort/rdzv/store.h"

namespace cohort {

int64_t Store::num_keys() {
  throw StoreError("this store cannot count its keys", "", describe());
}

std::vector<std::string> Store::multi_get(std::span<const std::string> keys) {
  wait(keys, timeout());
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(get(k));
  return values;
}

void Store::multi_set(std::span<const std::string> keys, std::span<const std::string> values) {
  if (keys.size() != values.size())
    throw StoreError("multi_set needs as many values as keys", "", describe());
  for (size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
}

void Store::append(std::string_view key, std::string_view value) {
  const std::string k(key);
  for (;;) {
    // compare_set's empty `expected` matches a missing key and an empty value alike.
    std::string current;
    if (check(std::span<const std::string>(&k, 1))) current = get(key);
    const std::string desired = current + std::string(value);
    if (compare_set(key, current, desired) == desired) return;
  }
}

}  // namespace cohort
