// Private: the indices a rank visits in an epoch, with PyTorch DistributedSampler semantics
// (shuffle with seed + epoch, pad by repeating the first indices, strided split by rank).
// Uses the runtime's cohort::DistributedSampler when libcohort is built; the stand-in below keeps
// single-process builds working before it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(COHORT_TRAIN_HAVE_RUNTIME) && __has_include("cohort/sampler.h")
#include "cohort/sampler.h"
#define COHORT_TRAIN_RUNTIME_SAMPLER 1
#else
#include "cohort/train/rng.h"
#endif

namespace cohort::train::detail {

inline std::vector<size_t> epoch_indices(size_t n, int world, int rank, uint64_t seed,
                                         uint64_t epoch) {
#ifdef COHORT_TRAIN_RUNTIME_SAMPLER
  cohort::DistributedSampler sampler(n, world, rank, /*shuffle=*/true, seed, /*drop_last=*/false);
  sampler.set_epoch(epoch);
  return sampler.indices();
#else
  std::vector<size_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = i;
  Rng rng(seed + epoch);
  for (size_t i = n; i > 1; --i) {
    const size_t j = rng.next_u64() % i;
    std::swap(perm[i - 1], perm[j]);
  }
  const size_t per_rank = (n + world - 1) / world;
  const size_t total = per_rank * world;
  for (size_t i = 0; perm.size() < total; ++i) perm.push_back(perm[i % n]);
  std::vector<size_t> mine;
  mine.reserve(per_rank);
  for (size_t i = static_cast<size_t>(rank); i < total; i += world) mine.push_back(perm[i]);
  return mine;
#endif
}

}  // namespace cohort::train::detail
