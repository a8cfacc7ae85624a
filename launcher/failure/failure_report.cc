#include "failure/failure_report.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <sstream>

namespace cohort::launch {
namespace {

std::string format_time(double ts) {
  // A time from outside (a worker's error file, a hang dated by a worker's clock) may be anything;
  // converting one past time_t's range is undefined. Years 1970 to 9999 print.
  constexpr double kYear10000 = 253402300800.0;
  if (!(ts >= 0 && ts < kYear10000)) return "unknown";
  std::time_t t = static_cast<std::time_t>(ts);
  std::tm tm{};
  if (::localtime_r(&t, &tm) == nullptr) return "unknown";
  char buf[32];
  if (std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm) == 0) return "unknown";
  return buf;
}

// Indents every line after the first by `indent` spaces.
std::string indent_lines(const std::string& text, size_t indent) {
  std::string out;
  for (char c : text) {
    out.push_back(c);
    if (c == '\n') out.append(indent, ' ');
  }
  return out;
}

// The end of a traceback the summary shows: its last kTraceLines lines, at most kTraceBytes.
constexpr size_t kTraceLines = 100;
constexpr size_t kTraceBytes = 16 * 1024;

std::string bounded_tail(const std::string& trace, const std::string& error_file) {
  size_t start = trace.size();  // the tail shown is trace[start, end)
  size_t lines = 0;
  while (start > 0 && lines < kTraceLines) {
    size_t before = start - 1;  // the line ending here, its own '\n' included
    if (trace[before] == '\n') {
      if (before == 0) {
        start = 0;
        break;
      }
      --before;
    }
    const size_t nl = trace.rfind('\n', before);
    const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
    if (trace.size() - line_start > kTraceBytes) {
      if (lines == 0) start = trace.size() - kTraceBytes;  // one huge line: its end
      break;
    }
    start = line_start;
    ++lines;
  }
  if (start == 0) return trace;
  return "... (" + std::to_string(start) + " bytes before these left out" +
         (error_file.empty() ? "" : "; the whole file: " + error_file) + ")\n" +
         trace.substr(start);
}

void block(std::ostringstream& os, const WorkerFailure& f) {
  os << "[" << f.global_rank << "]:\n";
  os << "  time      : " << format_time(f.timestamp) << "\n";
  os << "  host      : " << f.host << "\n";
  os << "  rank      : " << f.global_rank << " (local_rank: " << f.local_rank << ")\n";
  os << "  exitcode  : " << f.exit_code << " (pid: " << f.pid << ")\n";
  os << "  reason    : " << f.reason << "\n";
  os << "  error_file: " << (f.error_file.empty() ? "<N/A>" : f.error_file) << "\n";
  if (!f.gpu.empty()) os << "  gpu       : " << f.gpu << "\n";
  // A hang's culprit: who waited for it (not failures themselves).
  for (size_t i = 0; i < f.waiting.size(); ++i)
    os << (i == 0 ? "  waiting   : " : "              ") << f.waiting[i] << "\n";
  std::string trace = f.traceback.empty() ? f.message : f.traceback;
  if (!f.traceback.empty() && !f.message.empty() && f.message != f.reason &&
      f.traceback.find(f.message) == std::string::npos)
    trace += "\n" + f.message;
  os << "  traceback : "
     << indent_lines(trace.empty() ? "<N/A>" : bounded_tail(trace, f.error_file), 2) << "\n";
}

}  // namespace

// "1, 3, 5-9": ranks as a short list.
std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    os << (i ? ", " : "") << ranks[i];
    if (j > i) os << (j == i + 1 ? ", " : "-") << ranks[j];
    i = j + 1;
  }
  return os.str();
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool is_timeout(const WorkerFailure& f) {
  for (const std::string* text : {&f.reason, &f.message, &f.traceback}) {
    const std::string t = lower(*text);
    for (const char* word : {"timed out", "timeout", "deadline exceeded"})
      if (t.find(word) != std::string::npos) return true;
  }
  return false;
}

size_t root_cause(const std::vector<WorkerFailure>& failures) {
  auto root = std::min_element(
      failures.begin(), failures.end(),
      [](const WorkerFailure& a, const WorkerFailure& b) { return a.timestamp < b.timestamp; });
  return static_cast<size_t>(root - failures.begin());
}

std::vector<int> timeout_suspects(const std::vector<WorkerFailure>& failures, int64_t world_size) {
  std::vector<int> alive;
  // A world size past any real job's comes from a record someone else wrote: no list then.
  constexpr int64_t kMaxWorld = 1 << 24;
  if (failures.empty() || world_size <= 0 || world_size > kMaxWorld ||
      !is_timeout(failures[root_cause(failures)]))
    return alive;
  std::vector<bool> failed(static_cast<size_t>(world_size), false);
  for (const auto& f : failures)
    if (f.global_rank >= 0 && f.global_rank < world_size)
      failed[static_cast<size_t>(f.global_rank)] = true;
  for (int r = 0; r < static_cast<int>(world_size); ++r)
    if (!failed[static_cast<size_t>(r)]) alive.push_back(r);
  return alive;
}

std::string format_failure_report(const std::string& title, std::vector<WorkerFailure> failures,
                                  int world_size) {
  const std::vector<int> alive = timeout_suspects(failures, world_size);
  // The root cause is the earliest; the others follow in rank order, as torchrun lists them.
  auto root = failures.begin() + static_cast<std::ptrdiff_t>(root_cause(failures));
  const WorkerFailure first = *root;
  failures.erase(root);
  std::stable_sort(
      failures.begin(), failures.end(),
      [](const WorkerFailure& a, const WorkerFailure& b) { return a.global_rank < b.global_rank; });
  const std::string eq(60, '='), dash(60, '-');
  std::ostringstream os;
  os << eq << "\n" << title << " FAILED\n" << dash << "\nFailures:\n";
  if (failures.empty()) {
    os << "  <NO_OTHER_FAILURES>\n";
  } else {
    for (const auto& f : failures) block(os, f);
  }
  os << dash << "\nRoot Cause (first observed failure):\n";
  block(os, first);
  if (!alive.empty()) {
    os << dash << "\nRank " << first.global_rank
       << " timed out waiting; these ranks had not failed (a rank that was late or hung is "
          "among them):\n  "
       << rank_list(alive) << "\n";
  }
  os << eq << "\n";
  return os.str();
}

}  // namespace cohort::launch
