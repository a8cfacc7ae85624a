#include "cohort/train/gpt_trainer.h"
#include "cohort/error.h"

#include "cohort/train/preemption.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "cohort/heartbeat.h"
#include "cohort/train/checkpoint.h"
#include "cohort/train/metrics.h"
#include "cohort/train/progress.h"
#include "cohort/train/rng.h"
#include "cohort/train/schedule.h"
#include "cohort/train/text_data.h"

namespace cohort::train {
namespace {

using Clock = std::chrono::steady_clock;

class GptRun {
 public:
  GptRun(const GptOptions& o, Device& dev, Comm& comm)
      : o_(o),
        dev_(dev),
        comm_(comm),
        rank_(comm.rank()),
        world_(comm.world()),
        model_(dev, o.model, o.batch_size),
        rng_(o.seed + 1000003),
        precision_(o.precision.value_or(dev.default_precision())),
        scaler_(LossScaler::for_precision(precision_, o.loss_scaler)) {}

  GptResult run();

 private:
  bool resume();
  void save(int64_t step);
  double validate(int64_t step);
  // One optimiser step: accum micro-batches, the fused allreduce (its time in *comm_s), clipping
  // (the global norm in *norm) and AdamW at `lr`, unless the loss scaler skips it for overflow
  // (*applied says which). Returns the loss averaged over micro-steps and ranks.
  double train_step(int accum, float lr, double* norm, double* comm_s, bool* applied);
  std::string sample();
  void log(const std::string& line) {
    if (progress_) progress_->log(line);
  }

  const GptOptions& o_;
  Device& dev_;
  Comm& comm_;
  int rank_, world_;
  Gpt model_;
  Rng rng_;
  TextSplit text_;
  std::optional<TextLoader> train_loader_, val_loader_;
  DeviceBuffer<float> m_, v_;
  DeviceBuffer<int32_t> x_, y_;
  std::vector<int32_t> host_x_, host_y_;
  std::optional<Progress> progress_;
  std::optional<MetricsWriter> metrics_;
  GptResult result_;
  Precision precision_;
  LossScaler scaler_;
  int64_t adam_steps_ = 0;  // AdamW steps applied (fp16 skips some), its bias-correction count
};

bool GptRun::resume() {
  if (o_.checkpoint_dir.empty() || !o_.resume) return false;
  std::string meta_text;
  std::optional<Checkpoint> ckpt;
  if (rank_ == 0) {
    std::vector<std::string> skipped;
    ckpt = load_latest_checkpoint(o_.checkpoint_dir, &skipped);
    for (const auto& s : skipped) spdlog::warn("skipping checkpoint: {}", s);
    meta_text = ckpt ? ckpt->meta.dump() : "";
  }
  comm_.broadcast(meta_text);
  if (meta_text.empty()) return false;
  const nlohmann::json meta = nlohmann::json::parse(meta_text);
  if (meta.value("model", "") != "gpt" || meta.value("layout", "") != model_.layout().signature()) {
    throw UsageError("checkpoint in " + o_.checkpoint_dir +
                     " is not of this model (different trainer or GPT config)");
  }
  const size_t n = model_.num_params();
  if (rank_ == 0) {
    const char* names[] = {"params", "adam_m", "adam_v"};
    float* dst[] = {model_.params(), m_.get(), v_.get()};
    for (int i = 0; i < 3; ++i) {
      const auto& b = ckpt->block(names[i]);
      if (b.size() != n) throw UsageError("checkpoint parameter count does not match");
      dev_.upload(dst[i], b.data(), n * sizeof(float));
    }
  }
  comm_.broadcast(model_.params(), n);
  comm_.broadcast(m_.get(), n);
  comm_.broadcast(v_.get(), n);
  result_.start_step = meta.at("step").get<int64_t>();
  adam_steps_ = meta.value("adam_steps", result_.start_step);  // older checkpoints skipped none
  scaler_.restore(meta.value("loss_scaler", nlohmann::json::object()));
  train_loader_->set_global_position(meta.at("loader_position").get<int64_t>());
  const auto state = meta.at("rng").get<std::vector<uint64_t>>();
  if (state.size() == 4) rng_.set_state({state[0], state[1], state[2], state[3]});
  return true;
}

void GptRun::save(int64_t step) {
  if (o_.checkpoint_dir.empty() || rank_ != 0) return;
  Checkpoint c;
  c.step = step;
  const auto rs = rng_.state();
  c.meta = {{"model", "gpt"},
            {"layout", model_.layout().signature()},
            {"loader_position", train_loader_->global_position()},
            {"rng", std::vector<uint64_t>(rs.begin(), rs.end())},
            {"world_size", world_},
            {"batch_size", o_.batch_size},
            {"total_batch_tokens", o_.total_batch_tokens},
            {"seed", o_.seed},
            {"precision", precision_name(precision_)},
            {"loss_scaler", scaler_.state()},
            {"adam_steps", adam_steps_}};
  const size_t n = model_.num_params();
  std::vector<float> p(n), m(n), v(n);
  dev_.download(p.data(), model_.params(), n * sizeof(float));
  dev_.download(m.data(), m_.get(), n * sizeof(float));
  dev_.download(v.data(), v_.get(), n * sizeof(float));
  c.blocks = {{"params", std::move(p)}, {"adam_m", std::move(m)}, {"adam_v", std::move(v)}};
  write_checkpoint(o_.checkpoint_dir, c, o_.keep_checkpoints);
}

double GptRun::validate(int64_t step) {
  const int B = o_.batch_size, T = o_.model.block_size;
  val_loader_->reset();
  double sum = 0;
  for (int i = 0; i < o_.eval_batches; ++i) {
    val_loader_->next(host_x_.data(), host_y_.data());
    dev_.upload(x_.get(), host_x_.data(), sizeof(int32_t) * B * T);
    dev_.upload(y_.get(), host_y_.data(), sizeof(int32_t) * B * T);
    sum += model_.forward(x_.get(), y_.get(), B, T);
  }
  comm_.allreduce_sum(&sum, 1);
  const double val = sum / (static_cast<double>(o_.eval_batches) * world_);
  result_.val_loss = val;
  char line[96];
  std::snprintf(line, sizeof line, "step %lld: validation loss %.4f", static_cast<long long>(step),
                val);
  log(line);
  if (metrics_ && rank_ == 0) metrics_->write({{"step", step}, {"eval", true}, {"val_loss", val}});
  return val;
}

std::string GptRun::sample() {
  const int V = o_.model.vocab_size, maxT = o_.model.block_size;
  std::vector<int32_t> ctx;
  for (unsigned char c : o_.prompt) ctx.push_back(c);
  if (ctx.empty()) ctx.push_back('\n');
  std::string out;
  std::vector<float> probs(V);
  std::vector<int> order(V);
  for (int i = 0; i < o_.sample_bytes; ++i) {
    const int T = std::min<int>(static_cast<int>(ctx.size()), maxT);
    dev_.upload(x_.get(), ctx.data() + ctx.size() - T, sizeof(int32_t) * T);
    model_.forward(x_.get(), nullptr, 1, T);
    dev_.download(probs.data(), model_.probs() + static_cast<size_t>(T - 1) * V, sizeof(float) * V);
    // Top-k multinomial sampling, as build-nanogpt.
    std::iota(order.begin(), order.end(), 0);
    const int k = o_.top_k > 0 ? std::min(o_.top_k, V) : V;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return probs[a] > probs[b]; });
    double total = 0;
    for (int j = 0; j < k; ++j) total += probs[order[j]];
    double r = rng_.uniform() * total;
    int pick = order[k - 1];
    for (int j = 0; j < k; ++j) {
      r -= probs[order[j]];
      if (r <= 0) {
        pick = order[j];
        break;
      }
    }
    ctx.push_back(pick);
    out.push_back(static_cast<char>(pick));
  }
  return out;
}

double GptRun::train_step(int accum, float lr, double* norm, double* comm_s, bool* applied) {
  const int B = o_.batch_size, T = o_.model.block_size;
  const size_t n = model_.num_params();
  const float scale = scaler_.scale();  // 1 but in fp16
  model_.zero_grad();
  float loss_accum = 0;
  for (int micro = 0; micro < accum; ++micro) {
    train_loader_->next(host_x_.data(), host_y_.data());
    dev_.upload(x_.get(), host_x_.data(), sizeof(int32_t) * B * T);
    dev_.upload(y_.get(), host_y_.data(), sizeof(int32_t) * B * T);
    const float loss = model_.forward(x_.get(), y_.get(), B, T);
    model_.backward(scale / accum);  // gradients accumulate locally, nothing is sent yet
    loss_accum += loss / accum;
  }
  // Gradients (and the loss, in the free slot) cross ranks once per step, after the last
  // micro-step.
  dev_.upload(model_.grads() + n, &loss_accum, sizeof(float));
  const auto tc = Clock::now();
  comm_.allreduce_sum(model_.grads(), n + 1);
  *comm_s = std::chrono::duration<double>(Clock::now() - tc).count();
  dev_.download(&loss_accum, model_.grads() + n, sizeof(float));
  // The gradients are sums over ranks of scaled gradients: the norm and the update use their
  // mean, unscaled. An infinite or NaN gradient makes the sum of squares so too: that is
  // GradScaler's found_inf, the same on every rank (they hold the same sums).
  const double squares = dev_.sum_squares(model_.grads(), n);
  *norm = std::sqrt(squares) / world_ / scale;
  *applied = scaler_.update(!std::isfinite(squares));
  if (*applied) {
    const float grad_scale = clip_scale(*norm, o_.grad_clip) / (static_cast<float>(world_) * scale);
    AdamWParams hp = o_.adamw;
    hp.lr = lr;
    dev_.adamw_step_layout(model_.params(), m_.get(), v_.get(), model_.grads(), model_.layout(),
                           ++adam_steps_, hp, grad_scale);
  }
  dev_.synchronize();
  return static_cast<double>(loss_accum) / world_;
}

GptResult GptRun::run() {
  const int B = o_.batch_size, T = o_.model.block_size;
  const int64_t per_micro = static_cast<int64_t>(B) * T * world_;
  if (o_.total_batch_tokens <= 0 || o_.total_batch_tokens % per_micro != 0) {
    throw UsageError(
        "--total-batch-tokens " + std::to_string(o_.total_batch_tokens) +
        " must be a positive multiple of batch x block x world = " + std::to_string(B) + " x " +
        std::to_string(T) + " x " + std::to_string(world_) + " = " + std::to_string(per_micro));
  }
  const int accum = static_cast<int>(o_.total_batch_tokens / per_micro);
  result_.grad_accum = accum;
  if (o_.model.vocab_size < 256) {
    throw UsageError("the byte-level GPT needs a vocabulary of at least 256");
  }
  dev_.set_precision(precision_);  // throws UsageError when the device cannot
  text_ = split_text(load_text(o_.data));
  train_loader_.emplace(text_.train, B, T, rank_, world_);
  val_loader_.emplace(text_.val, B, T, rank_, world_);

  const size_t n = model_.num_params();
  m_ = DeviceBuffer<float>(dev_, n);
  v_ = DeviceBuffer<float>(dev_, n);
  dev_.zero(m_.get(), n * sizeof(float));
  dev_.zero(v_.get(), n * sizeof(float));
  x_ = DeviceBuffer<int32_t>(dev_, static_cast<size_t>(B) * T);
  y_ = DeviceBuffer<int32_t>(dev_, static_cast<size_t>(B) * T);
  host_x_.resize(static_cast<size_t>(B) * T);
  host_y_.resize(static_cast<size_t>(B) * T);
  model_.init(o_.seed);
  const bool resumed = resume();
  const uint32_t crc = device_checksum(dev_, model_.params(), n);
  comm_.check_same(crc, resumed ? "resumed weights checksum" : "initial weights checksum");

  if (rank_ == 0) {
    progress_.emplace(o_.out, true, o_.progress_bar && Progress::is_terminal(o_.out), "tokens/s",
                      o_.log_every);
  }
  // Every rank: rank 0 the whole story, the others their step times (metrics.h).
  metrics_.emplace(rank_metrics_path(metrics_path(o_.metrics_path, o_.checkpoint_dir), rank_),
                   resumed);
  {
    char line[384];
    std::snprintf(
        line, sizeof line,
        "gpt: %d rank%s x %d x %d tokens x %d micro-steps = %lld tokens/step on %s, %s GEMMs%s, "
        "gradients via %s; %zu parameters (%d layers, %d heads, %d embd); %zu train / %zu val "
        "bytes; seed %llu; weights crc32 %08x%s",
        world_, world_ == 1 ? "" : "s", B, T, accum, static_cast<long long>(o_.total_batch_tokens),
        dev_.describe().c_str(), precision_name(precision_),
        scaler_.enabled() ? " with loss scaling" : "", comm_.describe(),
        model_.layout().num_parameters(), o_.model.n_layer, o_.model.n_head, o_.model.n_embd,
        text_.train.size(), text_.val.size(), static_cast<unsigned long long>(o_.seed), crc,
        resumed ? (" (resumed at step " + std::to_string(result_.start_step) + ")").c_str() : "");
    log(line);
  }

  const float min_lr = o_.adamw.lr * o_.min_lr_ratio;
  double train_seconds = 0, comm_seconds = 0;
  const auto run_start = Clock::now();
  int64_t tokens = 0;
  double ema_rate = 0;
  int64_t step = result_.start_step;
  uint64_t launches = 0;
  for (; step < o_.max_steps; ++step) {
    if (o_.eval_interval > 0 && step % o_.eval_interval == 0) validate(step);
    const auto t0 = Clock::now();
    const uint64_t launches_before = dev_.launches();
    const float lr = cosine_lr(step, o_.warmup_steps, o_.max_steps, o_.adamw.lr, min_lr);
    double comm_s = 0, norm = 0;
    bool applied = true;
    const bool profiled = o_.profile_step == step + 1;
    if (profiled) dev_.profile(true);
    const double loss = train_step(accum, lr, &norm, &comm_s, &applied);
    if (profiled) dev_.profile(false);
    const uint64_t step_launches = dev_.launches() - launches_before;
    launches += step_launches;
    comm_seconds += comm_s;
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    train_seconds += dt;
    tokens += o_.total_batch_tokens;
    const double rate = static_cast<double>(o_.total_batch_tokens) / dt;
    ema_rate = ema_rate == 0 ? rate : 0.9 * ema_rate + 0.1 * rate;
    result_.last_loss = loss;
    result_.grad_norm = norm;
    if (progress_) progress_->step(step + 1, o_.max_steps, loss, ema_rate, lr);
    nlohmann::json line = {
        {"step", step + 1},
        {"tokens_per_s", rate},
        {"step_ms", 1e3 * dt},
        {"comm_ms", 1e3 * comm_s},
        {"time", std::chrono::duration<double>(Clock::now() - run_start).count()}};
    if (rank_ == 0) {
      line.update({{"loss", loss}, {"lr", lr}, {"grad_norm", norm}});
      if (scaler_.enabled()) line["loss_scale"] = scaler_.scale();
      if (!applied) line["skipped"] = true;
    } else {
      line["rank"] = rank_;
    }
    if (step_launches > 0) line["launches"] = step_launches;
    metrics_->write(line);
    if (!applied && rank_ == 0) {
      log("step " + std::to_string(step + 1) + " skipped: fp16 gradients overflowed; loss scale " +
          std::to_string(static_cast<double>(scaler_.scale())));
    }
    report_step(step + 1, dt, rate, comm_s);  // to cohortrun: its metrics and straggler check
    const CheckpointDue due =
        checkpoint_due(step + 1, o_.checkpoint_every, !o_.checkpoint_dir.empty());
    if (due != CheckpointDue::kNone) {
      save(step + 1);
      if (due == CheckpointDue::kRequested && rank_ == 0) {
        log("checkpoint at step " + std::to_string(step + 1) + ", as asked by SIGUSR1");
      }
    }
    if (o_.on_step) o_.on_step();
  }
  if (progress_) progress_->finish();
  validate(step);
  if (!o_.checkpoint_dir.empty() && (o_.checkpoint_every <= 0 || step % o_.checkpoint_every)) {
    save(step);
  }
  if (o_.sample_bytes > 0 && rank_ == 0) {
    result_.sample = sample();
    if (o_.out) {
      std::fprintf(o_.out, "--- sample (%d bytes) ---\n%s\n---\n", o_.sample_bytes,
                   result_.sample.c_str());
      std::fflush(o_.out);
    }
  }
  result_.steps = step;
  result_.precision = precision_;
  result_.loss_scale = scaler_.scale();
  result_.skipped_steps = scaler_.skipped_steps();
  result_.launches_per_step =
      step > result_.start_step ? static_cast<double>(launches) / (step - result_.start_step) : 0;
  result_.train_seconds = train_seconds;
  result_.comm_seconds = comm_seconds;
  result_.tokens_per_s = train_seconds > 0 ? tokens / train_seconds : 0;
  result_.flops_per_token = model_.flops_per_token(T);
  result_.params_crc = device_checksum(dev_, model_.params(), n);
  return result_;
}

}  // namespace

GptResult train_gpt(const GptOptions& options, Device& dev, Comm& comm) {
  GptRun run(options, dev, comm);
  return run.run();
}

}  // namespace cohort::train
