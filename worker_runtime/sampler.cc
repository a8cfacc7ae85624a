#include "cohort/sampler.h"

#include <random>
#include <string>
#include <utility>

#include "cohort/error.h"

namespace cohort {

std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  // at::CPUGeneratorImpl::set_current_seed builds at::mt19937(seed), whose state initialisation
  // is the standard one over the low 32 bits; random() returns one 32-bit draw. randperm_cpu
  // (ATen TensorFactories.cpp, 1.13) then swaps r[i] with r[i + random() % (n - i)].
  std::mt19937 engine(static_cast<uint32_t>(seed));
  std::vector<int64_t> r(n > 0 ? static_cast<size_t>(n) : 0);
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(engine()) % (n - i);
    std::swap(r[i], r[z + i]);
  }
  return r;
}

DistributedSampler::DistributedSampler(size_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas < 1) {
    throw Error("DistributedSampler: num_replicas must be at least 1, got " +
                std::to_string(num_replicas));
  }
  if (rank < 0 || rank >= num_replicas) {
    throw Error("DistributedSampler: invalid rank " + std::to_string(rank) +
                ", rank should be in the interval [0, " + std::to_string(num_replicas - 1) + "]");
  }
  const size_t r = static_cast<size_t>(num_replicas);
  if (drop_last && dataset_size % r != 0) {
    num_samples_ = dataset_size / r;  // math.ceil((N - R) / R) == floor(N / R) here
  } else {
    num_samples_ = (dataset_size + r - 1) / r;
  }
}

std::vector<size_t> DistributedSampler::indices() const {
  std::vector<size_t> all;
  all.reserve(dataset_size_);
  if (shuffle_) {
    for (int64_t v : torch_randperm(static_cast<int64_t>(dataset_size_), seed_ + epoch_)) {
      all.push_back(static_cast<size_t>(v));
    }
  } else {
    for (size_t i = 0; i < dataset_size_; ++i) all.push_back(i);
  }
  const size_t total = total_size();
  if (!drop_last_) {
    // Pad with the head of the list, repeating it as often as needed (PyTorch's two branches
    // both amount to cycling through the list).
    const size_t n = all.size();
    for (size_t i = 0; all.size() < total && n > 0; ++i) all.push_back(all[i % n]);
  } else {
    all.resize(total);
  }
  std::vector<size_t> mine;
  mine.reserve(num_samples_);
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_)) {
    mine.push_back(all[i]);
  }
  return mine;
}

}  // namespace cohort
