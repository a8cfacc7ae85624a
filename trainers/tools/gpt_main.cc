// cohort-train-gpt: a small byte-level GPT, data parallel under cohortrun (or torchrun).
#include <CLI/CLI.hpp>

#include "cohort/train/gpt_trainer.h"
#include "cohort/train/metrics.h"
#include "cohort/train/worker.h"
#include "common_options.h"

namespace {

using namespace cohort::train;

struct Cli {
  GptOptions o;
  WorkerOptions w;
  std::string summary;
  std::string precision;    // --precision ("": the device's default)
  double max_val_loss = 0;  // exit status 3 above it (0: no check)
};

void define_options(CLI::App& app, Cli& c) {
  app.add_option("--data", c.o.data, "text file or directory (default: the fortunes package text)");
  app.add_option("--n-layer", c.o.model.n_layer, "transformer blocks")->capture_default_str();
  app.add_option("--n-head", c.o.model.n_head, "attention heads")->capture_default_str();
  app.add_option("--n-embd", c.o.model.n_embd, "embedding width")->capture_default_str();
  app.add_option("--block-size", c.o.model.block_size, "sequence length")->capture_default_str();
  app.add_option("--batch-size", c.o.batch_size, "micro-batch per rank")->capture_default_str();
  app.add_option("--total-batch-tokens", c.o.total_batch_tokens, "tokens per optimiser step")
      ->capture_default_str();
  app.add_option("--max-steps", c.o.max_steps, "optimiser steps")->capture_default_str();
  app.add_option("--warmup-steps", c.o.warmup_steps, "linear warm-up steps")->capture_default_str();
  app.add_option("--lr", c.o.adamw.lr, "peak AdamW learning rate")->capture_default_str();
  app.add_option("--weight-decay", c.o.adamw.weight_decay, "AdamW weight decay")
      ->capture_default_str();
  app.add_option("--grad-clip", c.o.grad_clip, "max gradient norm (0: off)")->capture_default_str();
  app.add_option("--eval-batches", c.o.eval_batches, "micro-batches per validation")
      ->capture_default_str();
  app.add_option("--sample", c.o.sample_bytes, "bytes to generate at the end");
  app.add_option("--prompt", c.o.prompt, "start of the generated text");
  app.add_option("--seed", c.o.seed, "seed of the weights and sampling")->capture_default_str();
  app.add_option("--profile-step", c.o.profile_step,
                 "let a profiler capture this step alone (ncu --profile-from-start off, nsys "
                 "--capture-range=cudaProfilerApi)");
  add_common_options(app, c.o, c.w, c.summary, c.precision);
  app.add_option("--max-val-loss", c.max_val_loss,
                 "exit with status 3 when the final validation loss is higher (checks, CI)");
}

int real_main(int argc, char** argv) {
  Cli c;
  CLI::App app{"Train a small byte-level GPT, data parallel (launch with cohortrun)"};
  define_options(app, c);
  // --version, exit status 2 on usage errors, typed placeholders (cohort/base/cli11.h).
  cohort::cli::apply(app, trainer_conventions("cohort-train-gpt"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cohort::cli::exit_status(app, e);
  }
  c.o.precision = precision_option(c.precision);
  auto worker = Worker::start(c.w);
  c.o.on_step = worker->step_hook();
  if (worker->rank() != 0) c.o.out = nullptr;
  const GptResult r = train_gpt(c.o, worker->device(), worker->comm());
  if (worker->rank() == 0) {
    std::printf(
        "final: train loss %.4f  validation loss %.4f  %.0f tokens/s (%.3g model TFLOP/s)  "
        "%lld steps  (%.1f%% of step time in the gradient allreduce)\n",
        r.last_loss, r.val_loss, r.tokens_per_s, r.flops_per_token * r.tokens_per_s / 1e12,
        static_cast<long long>(r.steps),
        r.train_seconds > 0 ? 100.0 * r.comm_seconds / r.train_seconds : 0.0);
    write_summary(c.summary, {{"model", "gpt"},
                              {"world_size", worker->world_size()},
                              {"steps", r.steps},
                              {"start_step", r.start_step},
                              {"train_loss", r.last_loss},
                              {"val_loss", r.val_loss},
                              {"tokens_per_s", r.tokens_per_s},
                              {"model_flops_per_token", r.flops_per_token},
                              {"model_tflops", r.flops_per_token * r.tokens_per_s / 1e12},
                              {"device", worker->device().describe()},
                              {"precision", precision_name(r.precision)},
                              {"loss_scale", r.loss_scale},
                              {"skipped_steps", r.skipped_steps},
                              {"launches_per_step", r.launches_per_step},
                              {"gradient_path", worker->comm().describe()},
                              {"train_seconds", r.train_seconds},
                              {"comm_seconds", r.comm_seconds}});
    if (c.max_val_loss > 0 && r.val_loss > c.max_val_loss) {
      std::fprintf(stderr, "validation loss %.4f is above --max-val-loss %.4f\n", r.val_loss,
                   c.max_val_loss);
      return 3;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cohort::train::run_worker_main(argc, argv, real_main);
}
