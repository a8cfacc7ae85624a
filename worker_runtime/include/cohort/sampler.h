// cohort::DistributedSampler: which dataset indices each rank reads in an epoch, with the exact
// semantics of PyTorch 1.13's torch.utils.data.DistributedSampler.
//
// With shuffle, the order is torch.randperm(dataset_size) drawn from a CPU torch.Generator seeded
// with seed + epoch (reproduced bit for bit: mt19937 and the same Fisher-Yates variant), so a C++
// trainer and a PyTorch script given the same seed read the same samples. Without drop_last the
// list is padded with its own head until every rank gets num_samples() indices; with drop_last it
// is truncated instead. Rank r takes every num_replicas-th index starting at r.
//
// Thread safety: const methods are safe from any thread; set_epoch() needs external
// synchronisation, like any non-const method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cohort {

class DistributedSampler {
 public:
  // Throws cohort::Error when num_replicas < 1 or rank is outside [0, num_replicas).
  DistributedSampler(size_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  // Selects the epoch whose permutation indices() returns (seed + epoch seeds the generator).
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch, num_samples() of them, in reading order.
  std::vector<size_t> indices() const;

  // Indices per rank: ceil(N / R), or floor(N / R) with drop_last when N % R != 0.
  size_t num_samples() const { return num_samples_; }
  // num_samples() * num_replicas.
  size_t total_size() const { return num_samples_ * static_cast<size_t>(num_replicas_); }

 private:
  size_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  uint64_t epoch_ = 0;
  size_t num_samples_;
};

// torch.randperm(n, generator=g) for a CPU generator after g.manual_seed(seed), as in PyTorch 1.13.
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed);

}  // namespace cohort
