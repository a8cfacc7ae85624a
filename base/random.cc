#include "cohort/base/random.h"

#include <mutex>
#include <random>

namespace cohort {
namespace {

// One generator per process, seeded from the system once; std::random_device alone can be slow
// and is not guaranteed to be non-deterministic everywhere.
std::mt19937_64& generator(std::unique_lock<std::mutex>& lock) {
  static std::mutex mu;
  static std::mt19937_64 gen([] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }());
  lock = std::unique_lock(mu);
  return gen;
}

}  // namespace

uint64_t random_u64() {
  std::unique_lock<std::mutex> lock;
  return generator(lock)();
}

std::string random_tag(size_t n) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::unique_lock<std::mutex> lock;
  auto& gen = generator(lock);
  std::uniform_int_distribution<size_t> pick(0, sizeof(kChars) - 2);
  std::string s;
  s.reserve(n);
  for (size_t i = 0; i < n; ++i) s.push_back(kChars[pick(gen)]);
  return s;
}

}  // namespace cohort
