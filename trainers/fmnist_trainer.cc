#include "cohort/train/fmnist_trainer.h"
#include "cohort/error.h"

#include "cohort/train/preemption.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "cohort/heartbeat.h"
#include "cohort/train/checkpoint.h"
#include "cohort/train/cnn.h"
#include "cohort/train/metrics.h"
#include "cohort/train/progress.h"
#include "cohort/train/schedule.h"
#include "epoch_order.h"

namespace cohort::train {
namespace {

using Clock = std::chrono::steady_clock;

struct Score {
  double accuracy = 0;
  double loss = 0;
};

struct Position {
  int64_t step = 0;
  int epoch = 0;
  int64_t batch_in_epoch = 0;  // batches of this epoch already done
};

class FmnistRun {
 public:
  FmnistRun(const FmnistOptions& o, Device& dev, Comm& comm)
      : o_(o),
        dev_(dev),
        comm_(comm),
        rank_(comm.rank()),
        world_(comm.world()),
        model_(dev, o.batch_size),
        precision_(o.precision.value_or(dev.default_precision())),
        scaler_(LossScaler::for_precision(precision_, o.loss_scaler)) {}

  FmnistResult run();

 private:
  void load_data();
  std::optional<Position> resume();
  void save(const Position& pos);
  bool averaging() const { return o_.ema_decay > 0; }
  // Accuracy and mean loss of the model's current weights on the test set, over all ranks.
  Score score_test_set();
  void evaluate(int64_t step, int epoch);
  // One optimiser step on the images at `indices` (bs of them): forward, backward, the fused
  // allreduce (its time in *comm_s) and SGD, unless the loss scaler skips it for overflow
  // (*applied says which). Returns the loss averaged over ranks.
  double train_batch(const size_t* indices, int bs, float lr, double* comm_s, bool* applied);
  void log(const std::string& line) {
    if (progress_) progress_->log(line);
  }

  const FmnistOptions& o_;
  Device& dev_;
  Comm& comm_;
  int rank_, world_;
  FmnistCnn model_;
  FmnistSplit train_, test_;
  DeviceBuffer<float> momentum_, x_;
  // The weight average, and room to hold the weights while the average is evaluated.
  DeviceBuffer<float> average_, held_;
  DeviceBuffer<int32_t> y_;
  std::vector<float> host_x_;
  std::vector<int32_t> host_y_;
  std::optional<Progress> progress_;
  std::optional<MetricsWriter> metrics_;
  FmnistResult result_;
  Precision precision_;
  LossScaler scaler_;
};

void FmnistRun::load_data() {
  train_ = load_fmnist(o_.data_dir, "train", o_.train_limit);
  test_ = load_fmnist(o_.data_dir, "test", o_.test_limit);
}

std::optional<Position> FmnistRun::resume() {
  if (o_.checkpoint_dir.empty() || !o_.resume) return std::nullopt;
  // Rank 0 reads; everyone receives the state, so ranks need no shared filesystem.
  std::string meta_text;
  std::optional<Checkpoint> ckpt;
  if (rank_ == 0) {
    std::vector<std::string> skipped;
    ckpt = load_latest_checkpoint(o_.checkpoint_dir, &skipped);
    for (const auto& s : skipped) spdlog::warn("skipping checkpoint: {}", s);
    if (ckpt) {
      // What the other ranks must know of the file travels with its meta.
      nlohmann::json meta = ckpt->meta;
      meta["has_average"] = ckpt->has_block("average");
      meta_text = meta.dump();
    }
  }
  comm_.broadcast(meta_text);
  if (meta_text.empty()) return std::nullopt;
  const nlohmann::json meta = nlohmann::json::parse(meta_text);
  if (meta.value("model", "") != "fmnist-cnn" ||
      meta.value("layout", "") != model_.layout().signature()) {
    throw UsageError("checkpoint in " + o_.checkpoint_dir +
                     " is not of this model (different trainer or layout)");
  }
  const size_t n = model_.num_params();
  if (rank_ == 0) {
    const auto& p = ckpt->block("params");
    const auto& m = ckpt->block("momentum");
    if (p.size() != n || m.size() != n) {
      throw UsageError("checkpoint parameter count does not match the model");
    }
    dev_.upload(model_.params(), p.data(), n * sizeof(float));
    dev_.upload(momentum_.get(), m.data(), n * sizeof(float));
  }
  comm_.broadcast(model_.params(), n);
  comm_.broadcast(momentum_.get(), n);
  if (averaging()) {
    // A checkpoint written without averaging starts the average at its weights.
    if (meta.value("has_average", false)) {
      if (rank_ == 0) {
        const auto& a = ckpt->block("average");
        if (a.size() != n) throw FormatError("checkpoint average size does not match");
        dev_.upload(average_.get(), a.data(), n * sizeof(float));
      }
      comm_.broadcast(average_.get(), n);
    } else {
      dev_.copy(average_.get(), model_.params(), n * sizeof(float));
    }
  }
  scaler_.restore(meta.value("loss_scaler", nlohmann::json::object()));
  Position pos;
  pos.step = meta.at("step").get<int64_t>();
  pos.epoch = meta.at("epoch").get<int>();
  // The samples of this epoch already consumed are a prefix of its permutation whatever the
  // world size, so the position carries over to a different world size (rounded down).
  const int64_t samples_done = meta.at("samples_done_in_epoch").get<int64_t>();
  pos.batch_in_epoch = samples_done / (static_cast<int64_t>(o_.batch_size) * world_);
  return pos;
}

void FmnistRun::save(const Position& pos) {
  if (o_.checkpoint_dir.empty() || rank_ != 0) return;
  Checkpoint c;
  c.step = pos.step;
  c.meta = {{"model", "fmnist-cnn"},
            {"layout", model_.layout().signature()},
            {"epoch", pos.epoch},
            {"batch_in_epoch", pos.batch_in_epoch},
            {"samples_done_in_epoch", pos.batch_in_epoch * o_.batch_size * world_},
            {"world_size", world_},
            {"batch_size", o_.batch_size},
            {"seed", o_.seed},
            {"lr", o_.lr},
            {"momentum", o_.momentum},
            {"nesterov", o_.nesterov},
            {"ema_decay", o_.ema_decay},
            {"precision", precision_name(precision_)},
            {"loss_scaler", scaler_.state()}};
  const size_t n = model_.num_params();
  std::vector<float> p(n), m(n);
  dev_.download(p.data(), model_.params(), n * sizeof(float));
  dev_.download(m.data(), momentum_.get(), n * sizeof(float));
  c.blocks = {{"params", std::move(p)}, {"momentum", std::move(m)}};
  if (averaging()) {
    std::vector<float> a(n);
    dev_.download(a.data(), average_.get(), n * sizeof(float));
    c.blocks.emplace_back("average", std::move(a));
  }
  write_checkpoint(o_.checkpoint_dir, c, o_.keep_checkpoints);
}

Score FmnistRun::score_test_set() {
  // Each rank scores a disjoint shard (no padding), then (correct, count, loss) are summed.
  double stats[3] = {0, 0, 0};
  std::vector<size_t> idx;
  for (size_t i = rank_; i < static_cast<size_t>(test_.count); i += world_) idx.push_back(i);
  std::vector<float> probs(static_cast<size_t>(o_.batch_size) * FmnistCnn::kClasses);
  for (size_t start = 0; start < idx.size(); start += o_.batch_size) {
    const int b = static_cast<int>(std::min<size_t>(o_.batch_size, idx.size() - start));
    gather_fmnist(test_, idx.data() + start, b, host_x_.data(), host_y_.data());
    dev_.upload(x_.get(), host_x_.data(), sizeof(float) * b * FmnistCnn::kPixels);
    dev_.upload(y_.get(), host_y_.data(), sizeof(int32_t) * b);
    const float loss = model_.forward(x_.get(), y_.get(), b);
    dev_.download(probs.data(), model_.probs(), sizeof(float) * b * FmnistCnn::kClasses);
    for (int i = 0; i < b; ++i) {
      const float* p = probs.data() + static_cast<size_t>(i) * FmnistCnn::kClasses;
      const int pred = static_cast<int>(std::max_element(p, p + FmnistCnn::kClasses) - p);
      stats[0] += pred == host_y_[i] ? 1 : 0;
    }
    stats[1] += b;
    stats[2] += static_cast<double>(loss) * b;
  }
  comm_.allreduce_sum(stats, 3);
  if (stats[1] == 0) return Score{};
  return Score{stats[0] / stats[1], stats[2] / stats[1]};
}

void FmnistRun::evaluate(int64_t step, int epoch) {
  const Score raw = score_test_set();
  Score shown = raw;
  if (averaging()) {
    const size_t bytes = model_.num_params() * sizeof(float);
    dev_.copy(held_.get(), model_.params(), bytes);
    dev_.copy(model_.params(), average_.get(), bytes);
    shown = score_test_set();
    dev_.copy(model_.params(), held_.get(), bytes);
  }
  result_.test_accuracy = shown.accuracy;
  result_.test_loss = shown.loss;
  result_.raw_test_accuracy = raw.accuracy;
  result_.raw_test_loss = raw.loss;
  result_.evals.push_back({step, shown.accuracy, raw.accuracy});
  char line[200];
  int len =
      std::snprintf(line, sizeof line, "epoch %d step %lld: test accuracy %.2f%%  test loss %.4f",
                    epoch, static_cast<long long>(step), 100.0 * shown.accuracy, shown.loss);
  if (averaging()) {
    std::snprintf(line + len, sizeof line - len,
                  "  (weight average; the weights themselves: %.2f%%, loss %.4f)",
                  100.0 * raw.accuracy, raw.loss);
  }
  log(line);
  if (metrics_ && rank_ == 0) {
    nlohmann::json m = {{"step", step},
                        {"epoch", epoch},
                        {"eval", true},
                        {"test_accuracy", shown.accuracy},
                        {"test_loss", shown.loss}};
    if (averaging()) {
      m["raw_test_accuracy"] = raw.accuracy;
      m["raw_test_loss"] = raw.loss;
    }
    metrics_->write(m);
  }
}

double FmnistRun::train_batch(const size_t* indices, int bs, float lr, double* comm_s,
                              bool* applied) {
  const size_t n = model_.num_params();
  const float scale = scaler_.scale();  // 1 but in fp16
  gather_fmnist(train_, indices, bs, host_x_.data(), host_y_.data());
  dev_.upload(x_.get(), host_x_.data(), sizeof(float) * bs * FmnistCnn::kPixels);
  dev_.upload(y_.get(), host_y_.data(), sizeof(int32_t) * bs);
  model_.zero_grad();
  float loss = model_.forward(x_.get(), y_.get(), bs);
  model_.backward(scale);
  // One fused allreduce: the gradients, and the loss in the free slot after them.
  dev_.upload(model_.grads() + n, &loss, sizeof(float));
  const auto tc = Clock::now();
  comm_.allreduce_sum(model_.grads(), n + 1);
  *comm_s = std::chrono::duration<double>(Clock::now() - tc).count();
  dev_.download(&loss, model_.grads() + n, sizeof(float));
  // With loss scaling, an infinite or NaN gradient (its sum of squares is so too) skips the step.
  *applied =
      scaler_.update(scaler_.enabled() && !std::isfinite(dev_.sum_squares(model_.grads(), n)));
  if (*applied) {
    // The gradients are sums over ranks of scaled gradients; the step applies their mean.
    const SgdParams sgd{lr, o_.momentum, 0.0f, o_.nesterov};
    dev_.sgd_step(model_.params(), momentum_.get(), model_.grads(), n, sgd,
                  1.0f / (static_cast<float>(world_) * scale));
  }
  return static_cast<double>(loss) / world_;
}

FmnistResult FmnistRun::run() {
  if (o_.batch_size <= 0 || o_.epochs <= 0) {
    throw UsageError("batch size and epochs must be positive");
  }
  if (o_.eval_interval < 0) throw UsageError("--eval-interval must be 0 or positive");
  if (!(o_.ema_decay >= 0 && o_.ema_decay < 1)) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", o_.ema_decay);
    throw UsageError("--ema-decay must be in [0, 1) (0: no weight average), not " +
                     std::string(given));
  }
  if (o_.lr_schedule != "constant" && o_.lr_schedule != "cosine") {
    throw UsageError("--lr-schedule must be constant or cosine, not " + o_.lr_schedule);
  }
  dev_.set_precision(precision_);  // throws UsageError when the device cannot
  load_data();
  const size_t n = model_.num_params();
  momentum_ = DeviceBuffer<float>(dev_, n);
  dev_.zero(momentum_.get(), n * sizeof(float));
  x_ = DeviceBuffer<float>(dev_, static_cast<size_t>(o_.batch_size) * FmnistCnn::kPixels);
  y_ = DeviceBuffer<int32_t>(dev_, o_.batch_size);
  host_x_.resize(static_cast<size_t>(o_.batch_size) * FmnistCnn::kPixels);
  host_y_.resize(o_.batch_size);
  model_.init(o_.seed);
  if (averaging()) {
    average_ = DeviceBuffer<float>(dev_, n);
    held_ = DeviceBuffer<float>(dev_, n);
    dev_.copy(average_.get(), model_.params(), n * sizeof(float));
  }

  std::optional<Position> resumed = resume();
  Position pos = resumed.value_or(Position{});
  result_.start_step = pos.step;
  const uint32_t crc = device_checksum(dev_, model_.params(), n);
  comm_.check_same(crc, resumed ? "resumed weights checksum" : "initial weights checksum");

  if (rank_ == 0) {
    progress_.emplace(o_.out, true, o_.progress_bar && Progress::is_terminal(o_.out), "samples/s",
                      o_.log_every);
  }
  // Every rank: rank 0 the whole story, the others their step times (metrics.h).
  metrics_.emplace(rank_metrics_path(metrics_path(o_.metrics_path, o_.checkpoint_dir), rank_),
                   resumed.has_value());
  const int64_t per_rank = (train_.count + world_ - 1) / world_;
  const int64_t steps_per_epoch = (per_rank + o_.batch_size - 1) / o_.batch_size;
  // Steps are counted across restarts, possibly at other world sizes: the run ends at the end of
  // the last epoch at this world size, or at max_steps.
  int64_t total_steps = pos.step + (o_.epochs - pos.epoch) * steps_per_epoch - pos.batch_in_epoch;
  if (pos.epoch >= o_.epochs) total_steps = pos.step;
  if (o_.max_steps > 0) total_steps = std::min(total_steps, o_.max_steps);
  {
    char line[320];
    std::snprintf(
        line, sizeof line,
        "fmnist: %d rank%s x batch %d on %s, %s GEMMs%s, gradients via %s, %zu parameters, "
        "seed %llu, %lld steps (%lld per epoch), weights crc32 %08x%s",
        world_, world_ == 1 ? "" : "s", o_.batch_size, dev_.describe().c_str(),
        precision_name(precision_), scaler_.enabled() ? " with loss scaling" : "", comm_.describe(),
        model_.layout().num_parameters(), static_cast<unsigned long long>(o_.seed),
        static_cast<long long>(total_steps), static_cast<long long>(steps_per_epoch), crc,
        resumed ? (" (resumed at step " + std::to_string(pos.step) + ")").c_str() : "");
    log(line);
  }

  double train_seconds = 0, comm_seconds = 0;
  const auto run_start = Clock::now();
  int64_t samples = 0;
  double ema_rate = 0;
  bool stopped = pos.step >= total_steps;
  bool evaluated = false;
  uint64_t launches = 0;
  const int64_t first_step = pos.step;
  for (int epoch = pos.epoch; epoch < o_.epochs && !stopped; ++epoch) {
    const std::vector<size_t> order =
        detail::epoch_indices(train_.count, world_, rank_, o_.seed, static_cast<uint64_t>(epoch));
    const int64_t first_batch = epoch == pos.epoch ? pos.batch_in_epoch : 0;
    for (int64_t b = first_batch; b < steps_per_epoch; ++b) {
      const auto t0 = Clock::now();
      const size_t start = static_cast<size_t>(b) * o_.batch_size;
      const int bs = static_cast<int>(std::min<size_t>(o_.batch_size, order.size() - start));
      const float lr = o_.lr_schedule == "cosine"
                           ? cosine_lr(pos.step, o_.warmup_steps, total_steps, o_.lr, 0.0f)
                           : o_.lr;
      double comm_s = 0;
      bool applied = true;
      const uint64_t launches_before = dev_.launches();
      const double loss = train_batch(order.data() + start, bs, lr, &comm_s, &applied);
      if (averaging()) {
        dev_.ema_update(average_.get(), model_.params(), n, ema_decay_at(o_.ema_decay, pos.step));
      }
      const uint64_t step_launches = dev_.launches() - launches_before;
      launches += step_launches;
      comm_seconds += comm_s;
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      train_seconds += dt;
      samples += static_cast<int64_t>(bs) * world_;
      const double rate = static_cast<double>(bs) * world_ / dt;
      ema_rate = ema_rate == 0 ? rate : 0.9 * ema_rate + 0.1 * rate;
      pos.step += 1;
      pos.epoch = epoch;
      pos.batch_in_epoch = b + 1;
      result_.last_loss = loss;
      if (progress_) progress_->step(pos.step, total_steps, loss, ema_rate, lr);
      nlohmann::json line = {
          {"step", pos.step},
          {"samples_per_s", rate},
          {"step_ms", 1e3 * dt},
          {"comm_ms", 1e3 * comm_s},
          {"time", std::chrono::duration<double>(Clock::now() - run_start).count()}};
      if (rank_ == 0) {
        line.update({{"epoch", epoch}, {"loss", loss}, {"lr", lr}});
        if (scaler_.enabled()) line["loss_scale"] = scaler_.scale();
        if (!applied) line["skipped"] = true;
      } else {
        line["rank"] = rank_;
      }
      if (step_launches > 0) line["launches"] = step_launches;
      metrics_->write(line);
      report_step(pos.step, dt, rate, comm_s);  // to cohortrun: its metrics and straggler check
      const CheckpointDue due =
          checkpoint_due(pos.step, o_.checkpoint_every, !o_.checkpoint_dir.empty());
      if (due != CheckpointDue::kNone) {
        Position at = pos;
        if (at.batch_in_epoch == steps_per_epoch) at = Position{pos.step, epoch + 1, 0};
        save(at);
        if (due == CheckpointDue::kRequested && rank_ == 0) {
          log("checkpoint at step " + std::to_string(pos.step) + ", as asked by SIGUSR1");
        }
      }
      if (o_.on_step) o_.on_step();
      if (pos.step >= total_steps) {
        stopped = true;
        break;
      }
      // Evaluations between epoch ends (the last step of an epoch is evaluated below).
      if (o_.eval_interval > 0 && pos.step % o_.eval_interval == 0 && b + 1 < steps_per_epoch) {
        evaluate(pos.step, epoch);
      }
    }
    const bool epoch_complete = pos.batch_in_epoch == steps_per_epoch;
    if (progress_) progress_->finish();
    evaluate(pos.step, epoch + (epoch_complete ? 1 : 0));
    evaluated = true;
    if (epoch_complete) {
      result_.epochs_done = epoch + 1;
      pos = Position{pos.step, epoch + 1, 0};
    }
  }
  if (!evaluated) evaluate(pos.step, pos.epoch);  // resumed after the last step: report anyway
  if (!o_.checkpoint_dir.empty() && (o_.checkpoint_every <= 0 || pos.step % o_.checkpoint_every)) {
    save(pos);
  }
  result_.steps = pos.step;
  result_.precision = precision_;
  result_.loss_scale = scaler_.scale();
  result_.skipped_steps = scaler_.skipped_steps();
  result_.launches_per_step =
      pos.step > first_step ? static_cast<double>(launches) / (pos.step - first_step) : 0;
  result_.train_seconds = train_seconds;
  result_.comm_seconds = comm_seconds;
  result_.samples_per_s = train_seconds > 0 ? samples / train_seconds : 0;
  result_.params_crc = device_checksum(dev_, model_.params(), n);
  if (averaging()) result_.average_crc = device_checksum(dev_, average_.get(), n);
  return result_;
}

}  // namespace

FmnistResult train_fmnist(const FmnistOptions& options, Device& dev, Comm& comm) {
  FmnistRun run(options, dev, comm);
  return run.run();
}

}  // namespace cohort::train
