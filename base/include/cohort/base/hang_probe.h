// The hang probe's contract: the control socket (COHORT_CONTROL_FD, worker_env_names.h) between
// cohortrun and each of its workers. cohortrun asks when it suspects a hang; the worker answers
// from a thread of its own, while its main thread may be blocked in a collective.
//
// cohortrun writes "P <id>\n" (encode_request); the worker answers with one line of JSON
// (encode_answer), written by cohortrun's Python worker module (python/_cohort_worker/probe.py,
// which tests/base/python_probe_test.cc holds to parse_answer) or by libcohort
// (worker_runtime/probe_server.cc), and read by cohortrun (parse_answer):
//
//   {"v": 1, "id": 7, "pid": 4242, "time": 1764790000.25,
//    "threads": [{"name": "MainThread", "main": true,
//                 "frames": [["train.py", 12, "<module>", "loss.backward()"], ...]}],
//    "torch": "2.15.0",
//    "groups": [{"name": "0", "backend": "gloo", "ranks": [0, 1], "seq": 26}],
//    "fr": true,
//    "collectives": [{"pg": "0", "seq": 26, "p2p_seq": 0, "op": "gloo:all_reduce",
//                     "in": [[520]], "out": [[520]], "dtypes": ["Float"], "state": "scheduled",
//                     "done": false, "since": 1764789988.0, "timeout_s": 1800.0, "p2p": false}],
//    "errors": ["..."]}
//
// Frames run outermost first, innermost last. `seq` of a group counts the collectives this
// process issued on it (the same count on every member while they agree). `collectives` holds,
// per group, the entries not done and the last one done. Fields are only ever added; a reader
// takes a missing field as unknown. A worker that is asked again before it answered answers
// each question in turn: the id tells a late answer from the current one.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::hang_probe {

struct StackFrame {
  std::string file;
  int line = 0;
  std::string function;
  std::string source;  // the line's text ("" when unknown)
};

struct ThreadStack {
  std::string name;
  bool main = false;
  std::vector<StackFrame> frames;  // outermost first
};

struct GroupProgress {
  std::string name;        // PyTorch's group name ("0" for the default group), "cohort" (libcohort)
  std::string backend;     // "gloo", "nccl", "cohort-cpu", ...
  std::vector<int> ranks;  // global ranks of its members
  std::optional<int64_t> seq;  // collectives this process issued on it
};

struct CollectiveEntry {
  std::string group;  // GroupProgress::name
  int64_t seq = 0;    // collective sequence number in the group (0 for point-to-point)
  int64_t p2p_seq = 0;
  std::string op;         // "all_reduce" (PyTorch's "gloo:"/"nccl:" prefix removed)
  std::string in_sizes;   // compact JSON as the worker sent it: "[[520]]"
  std::string out_sizes;  // "[[520]]"
  std::string dtypes;     // "[\"Float\"]"
  std::string state;      // PyTorch's: "scheduled", "started", "completed"
  bool done = false;      // retired (PyTorch) / finished (libcohort)
  double since = 0;       // when it was issued, Unix seconds (the worker's clock)
  double timeout_s = 0;   // the group's timeout for it (0: unknown)
  bool p2p = false;
};

struct ProbeAnswer {
  int64_t id = 0;
  int pid = 0;
  double time = 0;  // when the worker answered, Unix seconds (its clock)
  std::vector<ThreadStack> threads;
  std::optional<std::string> torch;  // PyTorch's version, when it was imported
  std::vector<GroupProgress> groups;
  bool flight_recorder = false;  // `collectives` came from PyTorch's Flight Recorder
  std::vector<CollectiveEntry> collectives;
  std::vector<std::string> errors;
};

// The question cohortrun writes: "P <id>\n".
std::string encode_request(int64_t id);
// The id of a question line ("P <id>", without its newline); nullopt when it is not one.
std::optional<int64_t> parse_request(std::string_view line);

// Parses one answer line (without its newline). Throws ProtocolError naming what is malformed.
ProbeAnswer parse_answer(std::string_view text);
// The answer line for `a`, newline included (what libcohort writes).
std::string encode_answer(const ProbeAnswer& a);

// An answer line longer than this is malformed (cohortrun stops reading it).
inline constexpr size_t kMaxAnswerBytes = 4u << 20;

}  // namespace cohort::hang_probe
