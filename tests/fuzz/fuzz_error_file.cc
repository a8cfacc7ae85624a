// fuzz_error_file: reading a worker's $TORCHELASTIC_ERROR_FILE (cohort::launch::parse_error_file)
// and printing it in the failure summary, as the launcher does when a worker fails.
//
// The input is the file's text. parse_error_file() must never throw; it keeps the raw text, and
// when it cannot read either torchrun format it says so in the message with no traceback and no
// timestamp. The content then goes through the launcher's path: the timestamp is used only when
// positive, and never later than the exit time; format_failure_report() must not crash either,
// and the failure must survive the trip through the store that a multi-node job gives it
// (to_json on the failing node, failures_from_json on the others) without an exception.
// Seeds: tests/fuzz/corpus/error_file/ (both torchrun formats, docs/TORCHRUN.md §3.5).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "failure/error_file.h"
#include "failure/failure.h"
#include "failure/failure_report.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::launch;
  std::string text(reinterpret_cast<const char*>(data), size);
  ErrorFileContent c = parse_error_file(text);
  COHORT_FUZZ_CHECK(c.raw == text, "raw text not kept");
  if (c.message.rfind("unreadable error file", 0) == 0) {
    COHORT_FUZZ_CHECK(c.traceback.empty() && c.timestamp == 0, "unreadable file with content");
  }

  // As Launcher does with a failed worker's file (launcher.cc).
  WorkerFailure f;
  f.timestamp = 1.7e9;  // the exit time
  f.exit_code = 1;
  f.reason = "exited with code 1";
  f.message = f.reason;
  f.error_file = "/tmp/error.json";
  if (!c.message.empty()) f.message = c.message;
  f.traceback = c.traceback;
  if (c.timestamp > 0) f.timestamp = std::min(f.timestamp, c.timestamp);
  WorkerFailure other = f;
  other.timestamp = 1.6e9;
  std::string report = format_failure_report("train.py", {f, other});
  COHORT_FUZZ_CHECK(report.find("train.py FAILED") != std::string::npos, "no title");

  // round_ops::publish_failure, then collect_failures on another node.
  std::vector<WorkerFailure> back =
      failures_from_json(to_json(std::vector<WorkerFailure>{f, other}));
  COHORT_FUZZ_CHECK(back.size() == 2 && back[0].exit_code == 1 && back[0].timestamp == f.timestamp,
                    "failure changed on the way through the store");
  return 0;
}
