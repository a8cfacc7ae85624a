// Whole training runs, in-process: learning within a budget, resuming from a checkpoint gives
// bitwise the same result as not stopping, resuming at another world size, metrics and output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cohort/error.h"
#include "cohort/train/checkpoint.h"
#include "cohort/train/fmnist_trainer.h"
#include "cohort/train/gpt_trainer.h"
#include "cohort/train/precision.h"
#include "thread_group.h"
#include "trainer_fixture.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;
using testing::run_ranks;

class Training : public testing::TrainerTest {
 protected:
  void SetUp() override {
    testing::TrainerTest::SetUp();
    dev_ = make_cpu_device(1);
  }
  std::vector<nlohmann::json> metrics(const std::string& p) {
    std::vector<nlohmann::json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  std::unique_ptr<Device> dev_;
  Comm single_;
};

FmnistOptions fmnist_options() {
  FmnistOptions o;
  o.data_dir = testing::fmnist_dir();
  o.out = nullptr;
  o.metrics_path = std::string("-");
  return o;
}

TEST_F(Training, FmnistLearnsInTwoHundredSteps) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FmnistOptions o = fmnist_options();
  o.max_steps = 200;
  o.test_limit = 2000;
  const FmnistResult r = train_fmnist(o, *dev_, single_);
  // Measured 84-85% (chance is 10%); an initial loss of ln 10 = 2.30 falls below 0.7.
  EXPECT_GE(r.test_accuracy, 0.80);
  EXPECT_LT(r.test_loss, 0.6);
  EXPECT_EQ(r.steps, 200);
}

TEST_F(Training, FmnistOneEpochWithTwoRanks) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  std::vector<FmnistResult> r(2);
  FmnistOptions o = fmnist_options();
  o.eval_interval = 47;
  run_ranks(2, [&](int rank, cohort::ProcessGroup& pg) {
    auto dev = make_cpu_device(1);
    Comm comm(pg, *dev, false);
    r[rank] = train_fmnist(o, *dev, comm);
  });
  EXPECT_EQ(r[0].steps, 469);  // 30,000 images per rank in batches of 64
  EXPECT_EQ(r[0].epochs_done, 1);
  EXPECT_EQ(r[0].params_crc, r[1].params_crc);
  // Issue 5's target is 89%. Seeds 0-4 under cohortrun: the weight average 89.33-89.87% (mean
  // 89.59%), the last weights 86.94-89.09%; seed 0 (this test): 89.33% and 88.36% on the machine
  // that set the target, 89.29% and 88.94% on an AMD EPYC. Plain momentum (--no-nesterov) gave
  // 88.97-89.53%, seed 0 below the target.
  EXPECT_GE(r[0].test_accuracy, 0.89);
  EXPECT_GE(r[0].raw_test_accuracy, 0.87);
  // The average must help. At one point the gain is fragile: another CPU's OpenBLAS kernels round
  // differently, the run diverges like a run of another seed, and the last weights' score moves
  // by a point (on the EPYC the gain at the end was 0.35 points, below a former 0.5 bar). Over
  // the evaluations of the epoch's second half (every 47 steps from 235 to 469, 6 of them) the
  // average led at every one for seeds 0-4, by 0.23 to 2.7 points, and by 0.75 to 1.18 points on
  // the mean (EPYC; seeds 1-4 under torchrun): it must lead on the mean by more than 0.3 points,
  // and at 4 of the 6 at least.
  double gain = 0;
  int points = 0, ahead = 0;
  for (const FmnistEval& e : r[0].evals) {
    if (e.step < 235) continue;
    gain += e.test_accuracy - e.raw_test_accuracy;
    ahead += e.test_accuracy > e.raw_test_accuracy;
    ++points;
  }
  ASSERT_EQ(points, 6);
  EXPECT_GT(gain / points, 0.003) << "the average did not help";
  EXPECT_GE(ahead, 4) << "the average led at " << ahead << " of " << points << " evaluations";
  std::printf(
      "one epoch, 2 ranks: test accuracy %.2f%% (the weights themselves %.2f%%; the average "
      "ahead by %.2f points on the mean of the second half's %d evaluations, at %d of them), "
      "%.0f samples/s\n",
      100 * r[0].test_accuracy, 100 * r[0].raw_test_accuracy, 100 * gain / points, points, ahead,
      r[0].samples_per_s);
}

TEST_F(Training, FmnistResumeIsBitwiseIdenticalToAnUninterruptedRun) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FmnistOptions o = fmnist_options();
  o.train_limit = 512;  // 8 steps per epoch: the run crosses an epoch boundary
  o.test_limit = 500;
  o.epochs = 2;
  o.max_steps = 12;
  o.checkpoint_every = 3;
  o.checkpoint_dir = path("straight");
  const FmnistResult straight = train_fmnist(o, *dev_, single_);

  o.checkpoint_dir = path("resumed");
  o.metrics_path = path("resumed/metrics.jsonl");
  o.max_steps = 6;  // "killed" after step 6, mid-epoch
  const FmnistResult first = train_fmnist(o, *dev_, single_);
  EXPECT_EQ(first.steps, 6);
  o.max_steps = 12;
  const FmnistResult second = train_fmnist(o, *dev_, single_);
  EXPECT_EQ(second.start_step, 6);
  EXPECT_EQ(second.steps, 12);
  EXPECT_EQ(second.params_crc, straight.params_crc);
  // The weight average resumes too (it is not recomputed from the resumed weights).
  EXPECT_NE(straight.average_crc, 0u);
  EXPECT_NE(straight.average_crc, straight.params_crc);
  EXPECT_EQ(second.average_crc, straight.average_crc);
  EXPECT_EQ(second.test_accuracy, straight.test_accuracy);
  EXPECT_EQ(second.raw_test_accuracy, straight.raw_test_accuracy);
  // The metrics file continues: steps 1..12 once each, evaluations at both epoch ends.
  std::map<int64_t, int> seen;
  int evals = 0;
  for (const auto& m : metrics(path("resumed/metrics.jsonl"))) {
    if (m.contains("eval")) {
      ++evals;
      EXPECT_TRUE(m.contains("test_accuracy") && m.contains("raw_test_accuracy"));
    } else {
      seen[m.at("step").get<int64_t>()]++;
      EXPECT_TRUE(m.contains("loss") && m.contains("lr") && m.contains("samples_per_s"));
    }
  }
  EXPECT_EQ(seen.size(), 12u);
  for (const auto& [step, count] : seen) EXPECT_EQ(count, 1) << "step " << step;
  EXPECT_EQ(evals, 3);  // end of epoch 1, the stop at step 6, end of epoch 2
}

TEST_F(Training, FmnistAverageStartsAtTheWeightsOfACheckpointWithoutOne) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FmnistOptions o = fmnist_options();
  o.train_limit = 512;
  o.test_limit = 200;
  o.max_steps = 3;
  o.ema_decay = 0;
  o.checkpoint_dir = path("ckpt");
  const FmnistResult plain = train_fmnist(o, *dev_, single_);
  EXPECT_EQ(plain.average_crc, 0u);
  EXPECT_EQ(plain.test_accuracy, plain.raw_test_accuracy);
  o.ema_decay = 0.98f;  // resumed after its last step: evaluated, not trained
  const FmnistResult resumed = train_fmnist(o, *dev_, single_);
  EXPECT_EQ(resumed.start_step, 3);
  EXPECT_EQ(resumed.average_crc, plain.params_crc);
  EXPECT_EQ(resumed.test_accuracy, plain.test_accuracy);
}

TEST_F(Training, FmnistRejectsADecayOutsideZeroToOne) {
  FmnistOptions o = fmnist_options();
  for (float bad : {1.0f, -0.1f, std::nanf("")}) {
    o.ema_decay = bad;
    EXPECT_THROW(train_fmnist(o, *dev_, single_), UsageError) << bad;
  }
}

TEST_F(Training, FmnistResumesAtAnotherWorldSize) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FmnistOptions o = fmnist_options();
  o.train_limit = 1024;  // 16 steps per epoch on one rank, 8 on two
  o.test_limit = 500;
  o.checkpoint_dir = path("ckpt");
  o.max_steps = 6;
  train_fmnist(o, *dev_, single_);
  o.max_steps = 0;
  std::vector<FmnistResult> r(2);
  run_ranks(2, [&](int rank, cohort::ProcessGroup& pg) {
    auto dev = make_cpu_device(1);
    Comm comm(pg, *dev, false);
    r[rank] = train_fmnist(o, *dev, comm);
  });
  // 6 steps x 64 images = 384 done; on two ranks that is 3 of the epoch's 8 global batches.
  EXPECT_EQ(r[0].start_step, 6);
  EXPECT_EQ(r[0].steps, 6 + 5);
  EXPECT_EQ(r[0].epochs_done, 1);
  EXPECT_EQ(r[0].params_crc, r[1].params_crc);
  EXPECT_GT(r[0].test_accuracy, 0.25);  // 11 steps in: well above chance (0.1)
}

TEST_F(Training, FmnistEvaluatesEveryIntervalAndEveryRankLogsItsSteps) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FmnistOptions o = fmnist_options();
  o.train_limit = 1024;  // 8 steps of 2 x 64
  o.test_limit = 300;
  o.eval_interval = 3;
  o.metrics_path = path("run/metrics.jsonl");
  std::vector<FmnistResult> r(2);
  run_ranks(2, [&](int rank, cohort::ProcessGroup& pg) {
    auto dev = make_cpu_device(1);
    Comm comm(pg, *dev, false);
    r[rank] = train_fmnist(o, *dev, comm);
  });
  ASSERT_EQ(r[0].steps, 8);
  // Steps 3 and 6, then the end of the epoch (step 8), on both ranks with the same scores: each
  // scores its half of the test set and the counts are summed.
  std::vector<int64_t> eval_steps;
  for (const auto& m : metrics(path("run/metrics.jsonl"))) {
    if (m.contains("eval")) eval_steps.push_back(m.at("step").get<int64_t>());
  }
  EXPECT_EQ(eval_steps, (std::vector<int64_t>{3, 6, 8}));
  ASSERT_EQ(r[0].evals.size(), 3u);
  ASSERT_EQ(r[1].evals.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r[0].evals[i].step, eval_steps[i]);
    EXPECT_EQ(r[0].evals[i].test_accuracy, r[1].evals[i].test_accuracy);
    // Correct answers out of all 300 images, not out of one rank's 150.
    const double correct = r[0].evals[i].raw_test_accuracy * 300;
    EXPECT_NEAR(correct, std::round(correct), 1e-6);
  }
  EXPECT_GT(r[0].evals[2].raw_test_accuracy, 0.2);  // above chance (0.1) after 8 steps
  // Rank 1 writes its own training lines beside rank 0's file: no evaluations, no loss.
  ASSERT_TRUE(fs::exists(path("run/metrics.rank1.jsonl")));
  EXPECT_FALSE(fs::exists(path("run/metrics.rank0.jsonl")));
  for (const char* file : {"run/metrics.jsonl", "run/metrics.rank1.jsonl"}) {
    const bool rank1 = std::string(file).find("rank1") != std::string::npos;
    int64_t expect = 1;
    for (const auto& m : metrics(path(file))) {
      if (m.contains("eval")) continue;
      EXPECT_EQ(m.at("step").get<int64_t>(), expect++) << file;
      const double step_ms = m.at("step_ms").get<double>();
      const double comm_ms = m.at("comm_ms").get<double>();
      EXPECT_GT(step_ms, 0) << file;
      EXPECT_LT(step_ms, 60e3) << file;
      EXPECT_GE(step_ms, comm_ms) << file;
      EXPECT_GE(comm_ms, 0) << file;
      // Both ranks' images over the step's time.
      EXPECT_NEAR(m.at("samples_per_s").get<double>(), 128 / (step_ms / 1e3),
                  1e-6 * m.at("samples_per_s").get<double>())
          << file;
      EXPECT_EQ(m.contains("loss"), !rank1) << file;
      if (rank1) {
        EXPECT_EQ(m.at("rank"), 1);
      }
    }
    EXPECT_EQ(expect, 9) << file;
  }
}

TEST_F(Training, FmnistRejectsANegativeEvalInterval) {
  FmnistOptions o = fmnist_options();
  o.eval_interval = -1;
  EXPECT_THROW(train_fmnist(o, *dev_, single_), UsageError);
}

GptOptions gpt_options(const std::string& data) {
  GptOptions o;
  o.data = data;
  o.model = GptConfig{256, 32, 2, 2, 64};
  o.batch_size = 8;
  o.total_batch_tokens = 8 * 32 * 2;
  o.warmup_steps = 5;
  o.adamw.lr = 3e-3f;
  o.eval_batches = 8;
  o.out = nullptr;
  o.metrics_path = std::string("-");
  return o;
}

TEST_F(Training, GptLearnsTheCorpus) {
  // Words of a 16-word vocabulary: far below the 5.55 nats of a uniform byte (ln 256).
  GptOptions o = gpt_options(write_corpus(200000));
  o.max_steps = 150;
  o.eval_interval = 0;
  const GptResult r = train_gpt(o, *dev_, single_);
  EXPECT_LT(r.val_loss, 1.5) << "train loss " << r.last_loss;
}

// Stopped after step 6 as a killed worker stops (not a run of 6 steps: that would end its
// cosine schedule at step 6) and resumed from its step-6 checkpoint, the GPT ends where an
// uninterrupted 10-step run does, to the bit. A warm-up of 2 steps puts steps 2-9 on the cosine,
// which differs between runs of 6 and 10 steps. The CPU twin of
// CudaTrainer.GptIsBitwiseReproducibleAndResumesExactly.
TEST_F(Training, GptResumeIsBitwiseIdenticalToAnUninterruptedRun) {
  const std::string data = write_corpus(50000);
  GptOptions o = gpt_options(data);
  o.max_steps = 10;
  o.warmup_steps = 2;
  o.eval_interval = 4;
  o.checkpoint_every = 3;
  o.checkpoint_dir = path("straight");
  const GptResult straight = train_gpt(o, *dev_, single_);
  o.checkpoint_dir = path("resumed");
  o.on_step = testing::stop_after(6);
  EXPECT_THROW(train_gpt(o, *dev_, single_), testing::StoppedForTest);
  EXPECT_EQ(list_checkpoints(path("resumed")), (std::vector<int64_t>{6, 3}));
  o.on_step = nullptr;
  const GptResult second = train_gpt(o, *dev_, single_);
  EXPECT_EQ(second.start_step, 6);
  EXPECT_EQ(second.steps, 10);
  EXPECT_EQ(second.params_crc, straight.params_crc);
  EXPECT_EQ(second.val_loss, straight.val_loss);
  EXPECT_EQ(second.last_loss, straight.last_loss);
}

TEST_F(Training, GptResumesAtAnotherWorldSize) {
  GptOptions o = gpt_options(write_corpus(50000));
  o.eval_interval = 0;
  o.checkpoint_dir = path("ckpt");
  o.max_steps = 3;
  const GptResult one = train_gpt(o, *dev_, single_);
  EXPECT_EQ(one.grad_accum, 2);
  o.max_steps = 5;
  o.metrics_path = path("ckpt/metrics.jsonl");
  std::vector<GptResult> r(2);
  run_ranks(2, [&](int rank, cohort::ProcessGroup& pg) {
    auto dev = make_cpu_device(1);
    Comm comm(pg, *dev, false);
    r[rank] = train_gpt(o, *dev, comm);
  });
  EXPECT_EQ(r[0].start_step, 3);
  EXPECT_EQ(r[0].steps, 5);
  EXPECT_EQ(r[0].grad_accum, 1);  // the same tokens per step, split over two ranks
  EXPECT_EQ(r[0].params_crc, r[1].params_crc);
  EXPECT_LT(r[0].last_loss, std::log(256.0));
  // Rank 1's steps beside rank 0's: the resumed steps 4 and 5, tokens/s and step times.
  const auto lines = metrics(path("ckpt/metrics.rank1.jsonl"));
  ASSERT_EQ(lines.size(), 2u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].at("step"), 4 + static_cast<int>(i));
    EXPECT_EQ(lines[i].at("rank"), 1);
    EXPECT_GT(lines[i].at("tokens_per_s").get<double>(), 0);
    EXPECT_GT(lines[i].at("step_ms").get<double>(), 0);
    EXPECT_FALSE(lines[i].contains("eval"));
  }
}

TEST_F(Training, GptSamplesPrintableTextAtTheEnd) {
  GptOptions o = gpt_options(write_corpus(100000));
  o.max_steps = 60;
  o.eval_interval = 0;
  o.sample_bytes = 64;
  o.prompt = "the ";
  const GptResult r = train_gpt(o, *dev_, single_);
  ASSERT_EQ(r.sample.size(), 64u);
  for (char c : r.sample) EXPECT_TRUE(c == '\n' || (c >= 32 && c < 127)) << int(c);
  // The corpus's words show up.
  EXPECT_NE(r.sample.find("the"), std::string::npos) << r.sample;
}

// ---- mixed precision (precision.h), emulated on the CPU --------------------------------------

// The mean training loss of the last `last` steps in a metrics file (the same batches in every
// precision, so the curves are compared step for step, with the noise of single batches evened
// out).
double mean_final_loss(const std::vector<nlohmann::json>& lines, int last) {
  std::vector<double> losses;
  for (const auto& m : lines) {
    if (!m.contains("eval")) losses.push_back(m.at("loss").get<double>());
  }
  double sum = 0;
  const int n = std::min<int>(last, static_cast<int>(losses.size()));
  for (int i = 0; i < n; ++i) sum += losses[losses.size() - 1 - i];
  return n > 0 ? sum / n : NAN;
}

// bf16 and fp16 GEMMs (fp16 with loss scaling) train the GPT as fp32 does: the loss curves end
// within 1% of each other. The runs differ (the rounding happened), and fp16's scale stays at
// GradScaler's 65536 without an overflow.
TEST_F(Training, GptInBf16AndFp16EndsWithinOnePercentOfFp32) {
  GptOptions o = gpt_options(write_corpus(100000));
  o.max_steps = 50;
  o.eval_interval = 0;
  std::map<Precision, double> curve;
  std::map<Precision, GptResult> r;
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    o.precision = p;
    o.metrics_path = path(std::string(precision_name(p)) + ".jsonl");
    r[p] = train_gpt(o, *dev_, single_);
    EXPECT_EQ(r[p].precision, p);
    curve[p] = mean_final_loss(metrics(o.metrics_path), 10);
    std::printf("gpt %s: loss over the last 10 steps %.4f, validation loss %.4f\n",
                precision_name(p), curve[p], r[p].val_loss);
  }
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    EXPECT_NEAR(curve[p], curve[Precision::kFp32], 0.01 * curve[Precision::kFp32])
        << precision_name(p);
    EXPECT_NEAR(r[p].val_loss, r[Precision::kFp32].val_loss, 0.01 * r[Precision::kFp32].val_loss)
        << precision_name(p);
    EXPECT_NE(r[p].params_crc, r[Precision::kFp32].params_crc) << precision_name(p);
  }
  EXPECT_EQ(r[Precision::kFp16].loss_scale, 65536.0);
  EXPECT_EQ(r[Precision::kFp16].skipped_steps, 0);
  EXPECT_EQ(r[Precision::kBf16].loss_scale, 1.0);
}

// At the default learning rate (0.05, Nesterov momentum 0.9, batches of 64) the CNN's curves in
// different precisions drift apart by up to 3% over windows of 20-40 steps, this way or that, as
// runs of one precision do under any perturbation. At 0.02 the drift is slower: over the last 40
// steps of 100, bf16 and fp16 were within 0.45% of fp32 (batches of 32 and 64, two data orders
// each, seed 0).
TEST_F(Training, FmnistInBf16AndFp16EndsWithinOnePercentOfFp32) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FmnistOptions o = fmnist_options();
  o.max_steps = 100;
  o.lr = 0.02f;
  o.batch_size = 32;
  o.train_limit = 3200;  // one epoch
  o.test_limit = 200;
  std::map<Precision, double> curve;
  std::map<Precision, FmnistResult> r;
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    o.precision = p;
    o.metrics_path = path(std::string(precision_name(p)) + ".jsonl");
    r[p] = train_fmnist(o, *dev_, single_);
    curve[p] = mean_final_loss(metrics(o.metrics_path), 40);
    std::printf("fmnist %s: loss over the last 40 steps %.4f, test loss %.4f, accuracy %.4f\n",
                precision_name(p), curve[p], r[p].test_loss, r[p].test_accuracy);
  }
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    EXPECT_NEAR(curve[p], curve[Precision::kFp32], 0.01 * curve[Precision::kFp32])
        << precision_name(p);
    EXPECT_NE(r[p].params_crc, r[Precision::kFp32].params_crc) << precision_name(p);
  }
}

// A bf16 run and an fp16 run, each stopped after step 9 as a kill stops it and resumed, end as
// uninterrupted runs do, to the bit. fp16 starts at a loss scale of 2^30, which overflows: the
// first 7 steps are skipped as the scale backs off to 2^23, and after 3 clean steps (8 and 9
// before the interruption, 10 after it) it grows to 2^24; the scale, its count of clean steps and
// AdamW's step count (which skipped steps do not advance) travel in the checkpoint.
TEST_F(Training, GptResumesExactlyInBf16AndInFp16WithTheLossScale) {
  GptOptions o = gpt_options(write_corpus(50000));
  o.max_steps = 12;
  o.warmup_steps = 2;
  o.eval_interval = 0;
  o.checkpoint_every = 3;
  o.loss_scaler.init_scale = std::ldexp(1.0f, 30);
  o.loss_scaler.growth_interval = 3;
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    const std::string name = precision_name(p);
    o.precision = p;
    o.checkpoint_dir = path(name + "-straight");
    o.metrics_path = path(name + "-straight.jsonl");
    const GptResult straight = train_gpt(o, *dev_, single_);
    o.checkpoint_dir = path(name + "-resumed");
    o.metrics_path = path(name + "-resumed.jsonl");
    o.on_step = testing::stop_after(9);
    EXPECT_THROW(train_gpt(o, *dev_, single_), testing::StoppedForTest);
    o.on_step = nullptr;
    const auto ckpt = load_latest_checkpoint(path(name + "-resumed"));
    ASSERT_TRUE(ckpt.has_value());
    EXPECT_EQ(ckpt->meta.at("precision"), name);
    const GptResult resumed = train_gpt(o, *dev_, single_);
    EXPECT_EQ(resumed.start_step, 9) << name;
    EXPECT_EQ(resumed.params_crc, straight.params_crc) << name;
    EXPECT_EQ(resumed.val_loss, straight.val_loss) << name;
    EXPECT_EQ(resumed.loss_scale, straight.loss_scale) << name;
    if (p == Precision::kFp16) {
      std::vector<double> scales;
      int skipped = 0;
      for (const auto& m : metrics(path(name + "-straight.jsonl"))) {
        if (m.contains("eval")) continue;
        scales.push_back(m.at("loss_scale").get<double>());
        skipped += m.value("skipped", false);
      }
      std::printf("fp16 loss scales:");
      for (double s : scales) std::printf(" %g", s);
      std::printf(" (%d skipped)\n", skipped);
      EXPECT_GE(skipped, 1);
      EXPECT_EQ(straight.skipped_steps, skipped);
      EXPECT_GT(scales.back(), *std::min_element(scales.begin(), scales.end())) << "never grew";
    }
  }
}

// The CNN in fp16 likewise: stopped after step 7 (mid-epoch) and resumed, it ends as an
// uninterrupted run does, with its loss scale and weight average.
TEST_F(Training, FmnistResumesExactlyInFp16WithTheLossScale) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FmnistOptions o = fmnist_options();
  o.train_limit = 512;  // 8 steps per epoch
  o.test_limit = 200;
  o.epochs = 2;
  o.max_steps = 12;
  o.checkpoint_every = 1;
  o.precision = Precision::kFp16;
  o.loss_scaler.init_scale = std::ldexp(1.0f, 40);
  o.loss_scaler.growth_interval = 2;
  o.checkpoint_dir = path("straight");
  const FmnistResult straight = train_fmnist(o, *dev_, single_);
  EXPECT_GE(straight.skipped_steps, 1);
  o.checkpoint_dir = path("resumed");
  o.on_step = testing::stop_after(7);
  EXPECT_THROW(train_fmnist(o, *dev_, single_), testing::StoppedForTest);
  o.on_step = nullptr;
  const FmnistResult resumed = train_fmnist(o, *dev_, single_);
  EXPECT_EQ(resumed.start_step, 7);
  EXPECT_EQ(resumed.params_crc, straight.params_crc);
  EXPECT_EQ(resumed.average_crc, straight.average_crc);
  EXPECT_EQ(resumed.loss_scale, straight.loss_scale);
  EXPECT_EQ(load_latest_checkpoint(path("resumed"))->meta.at("precision"), "fp16");
}

// A checkpoint resumes in another precision: an fp32 run continued in bf16.
TEST_F(Training, GptCheckpointResumesInAnotherPrecision) {
  GptOptions o = gpt_options(write_corpus(50000));
  o.eval_interval = 0;
  o.checkpoint_dir = path("ckpt");
  o.max_steps = 3;
  o.precision = Precision::kFp32;
  train_gpt(o, *dev_, single_);
  o.max_steps = 5;
  o.precision = Precision::kBf16;
  const GptResult r = train_gpt(o, *dev_, single_);
  EXPECT_EQ(r.start_step, 3);
  EXPECT_EQ(r.precision, Precision::kBf16);
  EXPECT_EQ(load_latest_checkpoint(path("ckpt"))->meta.at("precision"), "bf16");
}

TEST_F(Training, PlainProgressLinesOffATerminal) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const std::string log = path("out.txt");
  std::FILE* f = std::fopen(log.c_str(), "w");
  ASSERT_NE(f, nullptr);
  FmnistOptions o = fmnist_options();
  o.out = f;
  o.max_steps = 20;
  o.log_every = 10;
  o.test_limit = 100;
  o.metrics_path = path("metrics.jsonl");
  train_fmnist(o, *dev_, single_);
  std::fclose(f);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("step 10/20  loss "), std::string::npos) << text;
  EXPECT_NE(text.find("samples/s"), std::string::npos) << text;
  EXPECT_NE(text.find("step 20/20"), std::string::npos) << text;
  EXPECT_NE(text.find("test accuracy"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << "a progress bar was drawn into a file";
  const auto m = metrics(path("metrics.jsonl"));
  ASSERT_EQ(m.size(), 21u);
  EXPECT_EQ(m[0].at("step"), 1);
  EXPECT_GT(m[0].at("loss").get<double>(), 1.5);
}

TEST_F(Training, PlotMetricsDrawsAPng) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "no gnuplot";
  for (const char* run : {"a", "b"}) {
    fs::create_directories(path(run));
    std::ofstream out(path(std::string(run) + "/metrics.jsonl"));
    for (int s = 1; s <= 50; ++s) {
      out << nlohmann::json{{"step", s}, {"loss", 2.3 / s}, {"lr", 0.05}}.dump() << "\n";
    }
    out << nlohmann::json{{"step", 50}, {"eval", true}, {"test_accuracy", 0.8}}.dump() << "\n";
    out << "not json\n";  // skipped with a warning
  }
  const std::string png = path("plot.png");
  const std::string cmd = std::string(COHORT_TRAINER_TEST_DIR) + "/../../scripts/plot_metrics " +
                          path("a/metrics.jsonl") + " " + path("b/metrics.jsonl") + " -o " + png +
                          " --smooth 5 > " + path("plot.log") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(png, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  EXPECT_GT(fs::file_size(png), 5000u);
}

// Files of both trainers, fmnist's with a slow rank 1: each evaluation and each throughput gets its
// own axis, and every rank a line of its own. The gnuplot script and data files are kept (--keep)
// and read back.
TEST_F(Training, PlotMetricsGivesEachMetricItsAxisAndEachRankALine) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "no gnuplot";
  fs::create_directories(path("fm"));
  fs::create_directories(path("gpt"));
  {
    std::ofstream r0(path("fm/metrics.jsonl")), r1(path("fm/metrics.rank1.jsonl"));
    for (int s = 1; s <= 40; ++s) {
      // Rank 1 works 30 ms a step, rank 0 10 ms and then waits 20 ms for it in the allreduce.
      const nlohmann::json t = {{"step", s}, {"samples_per_s", 128 / 0.03}, {"step_ms", 30.0}};
      nlohmann::json a = t, b = t;
      a.update({{"loss", 2.3 / s}, {"lr", 0.05}, {"comm_ms", 20.5}});
      b.update({{"rank", 1}, {"comm_ms", 0.5}});
      r0 << a.dump() << "\n";
      r1 << b.dump() << "\n";
      if (s % 10 == 0) {
        r0 << nlohmann::json{{"step", s}, {"eval", true}, {"test_accuracy", 0.5 + s / 100.0}}.dump()
           << "\n";
      }
    }
    std::ofstream g(path("gpt/metrics.jsonl"));
    for (int s = 1; s <= 50; ++s) {
      g << nlohmann::json{{"step", s},
                          {"loss", 5.0 / s},
                          {"tokens_per_s", 2e4},
                          {"step_ms", 25.0},
                          {"comm_ms", 1.0}}
               .dump()
        << "\n";
      if (s % 25 == 0) {
        g << nlohmann::json{{"step", s}, {"eval", true}, {"val_loss", 3.0}}.dump() << "\n";
      }
    }
  }
  const std::string png = path("plot.png"), keep = path("keep");
  const std::string cmd = std::string(COHORT_TRAINER_TEST_DIR) + "/../../scripts/plot_metrics " +
                          path("fm/metrics.jsonl") + " " + path("gpt/metrics.jsonl") + " -o " +
                          png + " --keep " + keep + " > " + path("plot.log") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_GT(fs::file_size(png), 20000u);
  std::ifstream in(keep + "/plot.gp");
  const std::string gp((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(gp.find("multiplot layout 2,2"), std::string::npos) << gp;
  // The accuracy on the left, the validation loss on the right; samples/s left, tokens/s right.
  const auto plot_after = [&](const std::string& ylabel) {
    const size_t at = gp.find("set ylabel \"" + ylabel + "\"");
    if (at == std::string::npos) return std::string("(no such panel)");
    const size_t plot = gp.find("\nplot ", at);
    return gp.substr(at, gp.find('\n', plot + 1) - at);
  };
  const std::string eval = plot_after("test accuracy (%)");
  EXPECT_NE(eval.find("set y2label \"validation loss\""), std::string::npos) << eval;
  EXPECT_NE(eval.find("eval1_val_loss.dat\" using 1:2 axes x1y2"), std::string::npos) << eval;
  EXPECT_NE(eval.find("eval0_test_accuracy.dat\" using 1:2 with"), std::string::npos) << eval;
  const std::string rates = plot_after("samples/s");
  EXPECT_NE(rates.find("set y2label \"tokens/s\""), std::string::npos) << rates;
  EXPECT_NE(rates.find("\"fm rank 1 (samples/s)\""), std::string::npos) << rates;
  EXPECT_NE(rates.find("rate1_0_tokens_per_s.dat\" using 1:2 axes x1y2"), std::string::npos)
      << rates;
  const std::string times = plot_after("ms per step (solid: outside the allreduce)");
  for (const char* title : {"\"fm rank 0\"", "\"fm rank 1\"", "\"gpt rank 0\"", "\"fm step\""}) {
    EXPECT_NE(times.find(title), std::string::npos) << title << " in " << times;
  }
  // The time outside the allreduce: rank 1's 29.5 ms stands above rank 0's 9.5 ms.
  std::ifstream w0(keep + "/work0_0.dat"), w1(keep + "/work0_1.dat"),
      acc(keep + "/eval0_test_accuracy.dat");
  double step = 0, v0 = 0, v1 = 0, a = 0;
  w0 >> step >> v0;
  w1 >> step >> v1;
  acc >> step >> a;
  EXPECT_DOUBLE_EQ(v0, 9.5);
  EXPECT_DOUBLE_EQ(v1, 29.5);
  EXPECT_EQ(step, 10);
  EXPECT_DOUBLE_EQ(a, 60.0);  // percent
}

}  // namespace
}  // namespace cohort::train
