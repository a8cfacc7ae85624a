// What `cohortctl status` prints: the list of jobs (one line each), the detail of one job
// (header, workers per node, stragglers, failures per round with their root cause), and the same
// content as one JSON document for scripts. Ages are taken against `now` (Unix seconds), given by
// the caller so that tests can fix it.
#pragma once

#include <string>
#include <vector>

#include "ctl/job_status.h"

namespace cohort::launch {

std::string render_job_list(const std::vector<JobStatus>& jobs, double now);
std::string render_job_detail(const JobStatus& job, double now);

// {"jobs": [{"run_id", "round", "nnodes", "workers", "state", "restarts", "max_restarts",
//  "updated", "age_s"}]}
std::string job_list_json(const std::vector<JobStatus>& jobs, double now);
// {"run_id", "round", "nnodes", "workers", "state", "restarts", "max_restarts", "updated",
//  "age_s", "nodes": [NodeStatus, with "host_info"], "stragglers": [...],
//  "rounds": [{"round", "outcome", "world_size", "failures": [...], "root_cause": {...},
//              "timeout_suspects": [ranks]}], "problems": [...]}
std::string job_detail_json(const JobStatus& job, double now);

// "1.5 KiB", "12.0 MiB"; "-" for unknown.
std::string format_bytes(long long bytes);

}  // namespace cohort::launch
