// metrics.jsonl: one JSON object per line, flushed as it is written, so a run that dies keeps
// everything up to its last step. Training lines carry {"step", "loss", "lr", throughput
// ("samples_per_s" or "tokens_per_s": all ranks' samples or tokens over this step's time),
// "step_ms" (the step as this rank timed it), "comm_ms" (of it, the gradient allreduce, waiting
// included), "time" (seconds since this process started training)}; evaluation lines carry
// {"step", "eval": true, ...results} (the Fashion-MNIST trainer's "test_accuracy", "test_loss",
// the GPT trainer's "val_loss"), every --eval-interval steps and at the end.
//
// Every other rank writes its own file beside rank 0's, metrics.rank<N>.jsonl
// (rank_metrics_path), always, so that a straggler shows: training lines only, with {"step",
// "rank", the throughput, "step_ms", "comm_ms", "time"} as rank N measured them. In a synchronous
// step the ranks wait for the slowest one inside the allreduce, so a straggler is the rank with
// the most step_ms - comm_ms (and the least comm_ms). scripts/plot_metrics draws all of them.
//
// Thread safety: none; each rank's training thread alone writes its file.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace cohort::train {

class MetricsWriter {
 public:
  // Does nothing when path is empty. Opens `path` for appending (a resumed run continues the file)
  // or truncates it first. Throws cohort::IoError when it cannot be opened.
  MetricsWriter(const std::string& path, bool append);
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  ~MetricsWriter();

  // Appends `record` as one line and flushes.
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

// Where a run writes its metrics: `--metrics` as given ("-": nowhere, returned as ""), else
// metrics.jsonl in the checkpoint directory, else in the working directory.
std::string metrics_path(const std::string& metrics_option, const std::string& checkpoint_dir);

// The file rank `rank` writes: `path` itself for rank 0, else `path` with ".rank<N>" before its
// extension (metrics.jsonl -> metrics.rank3.jsonl; no extension: appended). "" stays "".
std::string rank_metrics_path(const std::string& path, int rank);

// Writes `summary` as one JSON line to `path` (replacing it); nothing when path is empty. For
// scripts (scripts/bench/train_bench) that read a run's final results. Throws cohort::IoError
// when the file cannot be written.
void write_summary(const std::string& path, const nlohmann::json& summary);

}  // namespace cohort::train
