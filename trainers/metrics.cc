#include "cohort/train/metrics.h"
#include "cohort/error.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace cohort::train {

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f_) {
    throw IoError("cannot open metrics file " + path + ": " + std::strerror(errno), errno);
  }
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!f_) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

void write_summary(const std::string& path, const nlohmann::json& summary) {
  if (path.empty()) return;
  MetricsWriter w(path, /*append=*/false);
  w.write(summary);
}

std::string metrics_path(const std::string& metrics_option, const std::string& checkpoint_dir) {
  if (metrics_option == "-") return "";
  if (!metrics_option.empty()) return metrics_option;
  if (!checkpoint_dir.empty()) {
    return (std::filesystem::path(checkpoint_dir) / "metrics.jsonl").string();
  }
  return "metrics.jsonl";
}

std::string rank_metrics_path(const std::string& path, int rank) {
  if (path.empty() || rank == 0) return path;
  std::filesystem::path p(path);
  const std::string ext = p.extension().string();
  p.replace_extension();
  return p.string() + ".rank" + std::to_string(rank) + ext;
}

}  // namespace cohort::train
