#include "cohort/sampler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cohort/error.h"

namespace cohort {
namespace {

struct Fixture {
  size_t size;
  int replicas;
  bool shuffle;
  uint64_t seed;
  uint64_t epoch;
  bool drop_last;
  std::vector<size_t> indices;  // rank 0's, then rank 1's, ...
};

const std::vector<Fixture>& fixtures() {
  static const std::vector<Fixture> f = {
#include "sampler_fixtures.inc"
  };
  return f;
}

TEST(DistributedSampler, MatchesPyTorchIndexLists) {
  for (const Fixture& f : fixtures()) {
    std::vector<size_t> all;
    size_t per_rank = 0;
    for (int r = 0; r < f.replicas; ++r) {
      DistributedSampler s(f.size, f.replicas, r, f.shuffle, f.seed, f.drop_last);
      s.set_epoch(f.epoch);
      auto idx = s.indices();
      EXPECT_EQ(idx.size(), s.num_samples());
      per_rank = s.num_samples();
      all.insert(all.end(), idx.begin(), idx.end());
    }
    EXPECT_EQ(all, f.indices) << "size " << f.size << " replicas " << f.replicas << " seed "
                              << f.seed << " epoch " << f.epoch << " drop_last " << f.drop_last;
    EXPECT_EQ(per_rank * f.replicas, f.indices.size());
  }
}

TEST(DistributedSampler, CountsFollowPyTorch) {
  EXPECT_EQ(DistributedSampler(10000, 3, 0).num_samples(), 3334u);
  EXPECT_EQ(DistributedSampler(10000, 3, 0, true, 0, true).num_samples(), 3333u);
  EXPECT_EQ(DistributedSampler(60000, 8, 7).num_samples(), 7500u);
  EXPECT_EQ(DistributedSampler(3, 4, 0, true, 0, true).num_samples(), 0u);
  EXPECT_EQ(DistributedSampler(0, 4, 0).total_size(), 0u);
}

TEST(DistributedSampler, EpochChangesTheOrderAndSeedIsShared) {
  DistributedSampler a(1000, 2, 0, true, 7), b(1000, 2, 1, true, 7);
  const auto e0 = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), e0);
  // Ranks see disjoint halves of one permutation.
  std::vector<bool> seen(1000, false);
  for (auto* s : {&a, &b}) {
    s->set_epoch(1);
    for (size_t i : s->indices()) {
      EXPECT_FALSE(seen[i]) << i;
      seen[i] = true;
    }
  }
}

TEST(DistributedSampler, RejectsBadRanks) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), Error);
  EXPECT_THROW(DistributedSampler(10, 2, -1), Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0), Error);
}

TEST(TorchRandperm, MatchesTorch113) {
  // torch.randperm(10, generator=torch.Generator().manual_seed(5)) on torch 1.13.
  const std::vector<int64_t> want = {1, 4, 9, 6, 3, 5, 0, 2, 8, 7};
  EXPECT_EQ(torch_randperm(10, 5), want);
  EXPECT_TRUE(torch_randperm(0, 5).empty());
  EXPECT_EQ(torch_randperm(1, 5), std::vector<int64_t>{0});
}

}  // namespace
}  // namespace cohort
