// --event-log-handler console: torchrun's events (torch/distributed/elastic/events), one JSON
// object per line on cohortrun's stderr, in torchrun's shape: a worker's START, SUCCEEDED and
// FAILED, and the agent's SUCCEEDED or FAILED when the job ends. "null" (the default) records
// nothing.
#pragma once

#include <optional>
#include <string>

namespace cohort::launch {

class ConsoleStream;

struct EventContext {
  std::string run_id;
  std::string role;
  std::string host;
  std::string rdzv_backend;  // "static", "c10d", "etcd"
  std::string entry_point;
  int max_restarts = 0;
};

class EventLog {
 public:
  // `sink` null: events are dropped. It must outlive the log.
  EventLog(ConsoleStream* sink, EventContext context);

  // A worker event: state START, SUCCEEDED or FAILED.
  void worker(const std::string& state, int group_rank, int group_world_size, int local_rank,
              int global_rank, int world_size, int pid, std::optional<int> exit_code,
              int restarts_used, const std::string& raw_error = {});
  // The agent's final event: SUCCEEDED or FAILED.
  void agent(const std::string& state, int group_rank, int group_world_size, int restarts_used,
             const std::string& raw_error = {});

 private:
  ConsoleStream* sink_;
  EventContext context_;
  double start_;  // seconds since the epoch, for total_run_time
};

}  // namespace cohort::launch
