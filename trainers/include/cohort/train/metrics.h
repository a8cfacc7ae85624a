// metrics.jsonl: one JSON object per line, flushed as it is written, so a run that dies keeps
// everything up to its last step. Training lines carry {"step", "loss", "lr", throughput
// ("samples_per_s" or "tokens_per_s"), "comm_ms" (the step's gradient allreduce, waiting
// included), "time" (seconds since this process started training)}; evaluation lines carry
// {"step", "eval": true, ...results}. scripts/plot_metrics draws them.
//
// Thread safety: none; rank 0's training thread alone writes.
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

// Writes `summary` as one JSON line to `path` (replacing it); nothing when path is empty. For
// scripts (scripts/bench/train_bench) that read a run's final results. Throws cohort::IoError
// when the file cannot be written.
void write_summary(const std::string& path, const nlohmann::json& summary);

}  // namespace cohort::train
