// Command-line options both trainers share: checkpoints, metrics, logging, the results file, the
// device and threads. One definition, so that the two tools cannot drift apart.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "cohort/base/cli11.h"
#include "cohort/train/precision.h"
#include "cohort/train/worker.h"

namespace cohort::train {

// `Options` is FmnistOptions or GptOptions: both carry the evaluation, checkpoint and metrics
// fields.
// The --precision given ("": the device's default), checked by CLI11 (a usage error otherwise).
template <typename Options>
void add_common_options(CLI::App& app, Options& o, WorkerOptions& w, std::string& summary_path,
                        std::string& precision) {
  app.add_option("--precision", precision,
                 "GEMM arithmetic: fp32, tf32, bf16 or fp16 (with loss scaling); fp32 master "
                 "weights and optimiser state whatever it is (default: bf16 on a GPU that has "
                 "it, else fp32)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
  app.add_option("--eval-interval", o.eval_interval,
                 "steps between evaluations (0: only at the end, and at epoch ends)")
      ->capture_default_str();
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "write checkpoints here, resume from here");
  app.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints");
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "complete checkpoints to keep");
  app.add_flag("!--no-resume", o.resume, "ignore existing checkpoints");
  app.add_option("--metrics", o.metrics_path,
                 "metrics.jsonl path ('-': none); rank N>0 writes metrics.rankN.jsonl beside it");
  app.add_option("--log-every", o.log_every, "steps between log lines off a terminal");
  app.add_option("--summary-json", summary_path, "write the final results to this file (rank 0)");
  app.add_option("--device", w.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--threads", w.threads, "CPU threads (default: OMP_NUM_THREADS, else all)");
}

// The precision of a --precision value, unset for "" (the device's default).
inline std::optional<Precision> precision_option(const std::string& value) {
  if (value.empty()) return std::nullopt;
  return parse_precision(value);
}

// The command-line conventions of cohort's binaries (cohort/base/cli11.h) with the trainers'
// placeholders; no environment variables (a trainer's environment is its launcher's).
inline cohort::cli::Conventions trainer_conventions(std::string program) {
  cohort::cli::Conventions c;
  c.program = std::move(program);
  c.placeholders = {{"--device", "cpu|cuda|cuda:N"},
                    {"--lr-schedule", "constant|cosine"},
                    {"--metrics", "PATH"},
                    {"--precision", "fp32|tf32|bf16|fp16"}};
  return c;
}

}  // namespace cohort::train
