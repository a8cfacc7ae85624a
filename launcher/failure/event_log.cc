#include "failure/event_log.h"

#include <nlohmann/json.hpp>

#include "failure/failure.h"
#include "failure/json_text.h"
#include "loop/console.h"

namespace cohort::launch {

using nlohmann::json;

EventLog::EventLog(ConsoleStream* sink, EventContext context)
    : sink_(sink), context_(std::move(context)), start_(wall_clock_now()) {}

namespace {

json base_metadata(const EventContext& c, const std::string& state, int group_rank,
                   int restarts_used, double start, const std::string& raw_error) {
  return json{{"run_id", c.run_id},
              {"global_rank", nullptr},
              {"group_rank", group_rank},
              {"worker_id", nullptr},
              {"role", c.role},
              {"hostname", c.host},
              {"state", state},
              {"total_run_time", static_cast<int>(wall_clock_now() - start)},
              {"rdzv_backend", c.rdzv_backend},
              {"raw_error", raw_error.empty() ? json(nullptr) : json(raw_error)},
              {"agent_restarts", restarts_used},
              {"duration_ms", nullptr}};
}

}  // namespace

void EventLog::worker(const std::string& state, int group_rank, int group_world_size,
                      int local_rank, int global_rank, int world_size, int pid,
                      std::optional<int> exit_code, int restarts_used,
                      const std::string& raw_error) {
  if (sink_ == nullptr) return;
  json md = base_metadata(context_, state, group_rank, restarts_used, start_, raw_error);
  md["global_rank"] = global_rank;
  md["worker_id"] = std::to_string(pid);
  // torchrun nests these as a JSON string, each value a 1-tuple.
  md["metadata"] =
      json_text(json{{"group_world_size", group_world_size},
                     {"entry_point", context_.entry_point},
                     {"local_rank", json::array({local_rank})},
                     {"role_rank", json::array({global_rank})},
                     {"role_world_size", json::array({world_size})},
                     {"exit_code", json::array({exit_code ? json(*exit_code) : json()})},
                     {"worker_pid", json::array({pid})}});
  json e{{"name", "torchelastic.worker.status." + state},
         {"source", "WORKER"},
         {"timestamp", 0},
         {"metadata", md}};
  sink_->write(json_text(e) + "\n");
}

void EventLog::agent(const std::string& state, int group_rank, int group_world_size,
                     int restarts_used, const std::string& raw_error) {
  if (sink_ == nullptr) return;
  json md = base_metadata(context_, state, group_rank, restarts_used, start_, raw_error);
  md["metadata"] = json_text(
      json{{"group_world_size", group_world_size}, {"entry_point", context_.entry_point}});
  json e{{"name", "torchelastic.worker.status." + state},
         {"source", "AGENT"},
         {"timestamp", 0},
         {"metadata", md}};
  sink_->write(json_text(e) + "\n");
}

}  // namespace cohort::launch
