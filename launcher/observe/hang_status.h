// HangStatus: the last judgement of a hang probe (observe/hang_watch.h), as the node that made it
// publishes it in its status record (observe/node_status.h, key "hang") and `cohortctl status`
// shows it. The JSON is part of the status record's contract: fields are only added.
//
//   {"probe": 3, "at": 1764790000.2, "verdict": "hung", "hung_for_s": 12.0,
//    "summary": "rank 1 (n0, pid 4242) never entered all_reduce ...",
//    "culprits": [{"rank": 1, "host": "n0", "reason": "hung: ...", "stack": "Thread ..."}],
//    "waiting": ["rank 0 (n0, pid 4241): waits in all_reduce ..."]}
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "failure/hang_analysis.h"

namespace cohort::launch {

struct HangStatus {
  int64_t probe = 0;
  double at = 0;  // Unix seconds
  HangReport report;
  std::vector<std::string> culprit_hosts;  // beside report.culprits
};

std::string to_json(const HangStatus& s);
// Throws ProtocolError naming what is malformed.
HangStatus hang_status_from_json(const std::string& text);

}  // namespace cohort::launch
