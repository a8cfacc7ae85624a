// Data-parallel correctness with ranks as threads (ThreadGroup): R ranks x batch b match 1 rank x
// batch R*b on the same samples, gradient accumulation over k micro-steps matches one k-times
// batch, and ranks that start from different weights are stopped.
#include <gtest/gtest.h>

#include <mutex>

#include "cohort/error.h"
#include "cohort/train/comm.h"
#include "cohort/train/fmnist_trainer.h"
#include "cohort/train/gpt_trainer.h"
#include "test_util.h"
#include "thread_group.h"
#include "trainer_fixture.h"

namespace cohort::train {
namespace {

using testing::expect_close;
using testing::run_ranks;

class DataParallel : public testing::TrainerTest {};

FmnistOptions small_fmnist(const std::string& ckpt, int batch) {
  FmnistOptions o;
  o.data_dir = testing::fmnist_dir();
  o.batch_size = batch;
  o.seed = 3;
  o.train_limit = 512;
  o.test_limit = 200;
  o.max_steps = 6;
  o.checkpoint_dir = ckpt;
  o.metrics_path = std::string("-");
  o.out = nullptr;
  return o;
}

TEST_F(DataParallel, FmnistTwoRanksMatchOneRankWithTwiceTheBatch) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  std::vector<FmnistResult> two(2);
  run_ranks(2, [&](int rank, cohort::ProcessGroup& pg) {
    auto dev = make_cpu_device(1);
    Comm comm(pg, *dev, false);
    two[rank] = train_fmnist(small_fmnist(path("two"), 8), *dev, comm);
  });
  auto dev = make_cpu_device(1);
  Comm single;
  const FmnistResult one = train_fmnist(small_fmnist(path("one"), 16), *dev, single);
  EXPECT_EQ(two[0].params_crc, two[1].params_crc) << "ranks diverged";
  EXPECT_EQ(two[0].steps, 6);
  EXPECT_EQ(one.steps, 6);
  EXPECT_NEAR(two[0].last_loss, one.last_loss, 1e-5 * one.last_loss);
  EXPECT_TRUE(expect_close(final_params(path("two")), final_params(path("one")), 1e-7, 1e-5));
  EXPECT_TRUE(expect_close(final_params(path("two"), "momentum"),
                           final_params(path("one"), "momentum"), 1e-7, 1e-5));
  EXPECT_DOUBLE_EQ(two[0].test_accuracy, one.test_accuracy);
}

GptOptions small_gpt(const std::string& data, const std::string& ckpt, int batch, int64_t total) {
  GptOptions o;
  o.data = data;
  o.model = GptConfig{256, 16, 2, 2, 32};
  o.batch_size = batch;
  o.total_batch_tokens = total;
  o.max_steps = 3;
  o.warmup_steps = 1;
  o.adamw.lr = 1e-3f;
  o.eval_interval = 0;
  o.eval_batches = 2;
  o.checkpoint_dir = ckpt;
  o.metrics_path = std::string("-");
  o.out = nullptr;
  return o;
}

TEST_F(DataParallel, GptTwoRanksMatchOneRankWithTwiceTheBatch) {
  const std::string data = write_corpus(20000);
  std::vector<GptResult> two(2);
  run_ranks(2, [&](int rank, cohort::ProcessGroup& pg) {
    auto dev = make_cpu_device(1);
    Comm comm(pg, *dev, false);
    two[rank] = train_gpt(small_gpt(data, path("two"), 2, 128), *dev, comm);
  });
  auto dev = make_cpu_device(1);
  Comm single;
  const GptResult one = train_gpt(small_gpt(data, path("one"), 4, 128), *dev, single);
  EXPECT_EQ(two[0].grad_accum, 2);
  EXPECT_EQ(one.grad_accum, 2);
  EXPECT_EQ(two[0].params_crc, two[1].params_crc) << "ranks diverged";
  EXPECT_NEAR(two[0].last_loss, one.last_loss, 1e-5 * one.last_loss);
  EXPECT_NEAR(two[0].val_loss, one.val_loss, 1e-5 * one.val_loss);
  // AdamW and clipping hide a wrong gradient scale from the weights; the norm shows it.
  EXPECT_NEAR(two[0].grad_norm, one.grad_norm, 1e-5 * one.grad_norm);
  EXPECT_TRUE(expect_close(final_params(path("two")), final_params(path("one")), 1e-6, 1e-5));
}

TEST_F(DataParallel, GptAccumulationMatchesOneLargerBatch) {
  const std::string data = write_corpus(20000);
  auto dev = make_cpu_device(1);
  Comm single;
  const GptResult accum4 = train_gpt(small_gpt(data, path("accum4"), 2, 128), *dev, single);
  const GptResult accum1 = train_gpt(small_gpt(data, path("accum1"), 8, 128), *dev, single);
  EXPECT_EQ(accum4.grad_accum, 4);
  EXPECT_EQ(accum1.grad_accum, 1);
  EXPECT_NEAR(accum4.last_loss, accum1.last_loss, 1e-5 * accum1.last_loss);
  EXPECT_NEAR(accum4.grad_norm, accum1.grad_norm, 1e-5 * accum1.grad_norm);
  EXPECT_TRUE(expect_close(final_params(path("accum4")), final_params(path("accum1")), 1e-6, 1e-5));
}

TEST_F(DataParallel, BatchThatDoesNotDivideIsRejected) {
  const std::string data = write_corpus(20000);
  auto dev = make_cpu_device(1);
  Comm single;
  EXPECT_THROW(train_gpt(small_gpt(data, "", 3, 128), *dev, single), UsageError);
}

TEST_F(DataParallel, DifferentInitialWeightsAreDetectedOnEveryRank) {
  const std::string data = write_corpus(20000);
  std::vector<std::string> errors(2);
  std::mutex mu;
  run_ranks(2, [&](int rank, cohort::ProcessGroup& pg) {
    auto dev = make_cpu_device(1);
    Comm comm(pg, *dev, false);
    GptOptions o = small_gpt(data, "", 2, 128);
    o.seed = static_cast<uint64_t>(rank);  // a bug: ranks seeded differently
    try {
      train_gpt(o, *dev, comm);
    } catch (const cohort::Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors[rank] = e.what();
    }
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("initial weights checksum differs"), std::string::npos) << e;
}

TEST_F(DataParallel, CommSumsAndBroadcasts) {
  run_ranks(3, [&](int rank, cohort::ProcessGroup& pg) {
    auto dev = make_cpu_device(1);
    Comm comm(pg, *dev, false);
    EXPECT_EQ(comm.world(), 3);
    std::vector<float> g = {float(rank), 1.0f};
    comm.allreduce_sum(g.data(), 2);
    EXPECT_EQ(g, (std::vector<float>{3.0f, 3.0f}));
    std::string s = rank == 0 ? std::string("a string of 19 byte") : std::string("x");
    comm.broadcast(s);
    EXPECT_EQ(s, "a string of 19 byte");
    std::vector<float> p = {float(rank) + 1.0f};
    comm.broadcast(p.data(), 1, 2);
    EXPECT_EQ(p[0], 3.0f);
    EXPECT_NO_THROW(comm.check_same(42, "answer"));
  });
}

}  // namespace
}  // namespace cohort::train
