#include "failure/failure.h"

#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "cohort/base/json_number.h"
#include "cohort/base/parse.h"
#include "cohort/error.h"
#include "failure/json_text.h"

namespace cohort::launch {
namespace {

using nlohmann::json;

json failure_json(const WorkerFailure& f) {
  json j{{"node_rank", f.node_rank},
         {"local_rank", f.local_rank},
         {"global_rank", f.global_rank},
         {"host", f.host},
         {"pid", f.pid},
         {"exit_code", f.exit_code},
         {"timestamp", f.timestamp},
         {"reason", f.reason},
         {"error_file", f.error_file},
         {"message", f.message},
         {"traceback", f.traceback}};
  if (!f.gpu.empty()) j["gpu"] = f.gpu;  // older agents neither write nor expect it
  if (!f.waiting.empty()) j["waiting"] = f.waiting;
  return j;
}

WorkerFailure failure_from(const json& j) {
  WorkerFailure f;
  f.node_rank = json_number::required<int>(j, "node_rank");
  f.local_rank = json_number::required<int>(j, "local_rank");
  f.global_rank = json_number::required<int>(j, "global_rank");
  f.host = j.value("host", "");
  f.pid = json_number::field<int>(j, "pid", 0);
  f.exit_code = json_number::field<int>(j, "exit_code", 0);
  f.timestamp = j.value("timestamp", 0.0);
  f.reason = j.value("reason", "");
  f.error_file = j.value("error_file", "");
  f.message = j.value("message", "");
  f.traceback = j.value("traceback", "");
  f.gpu = j.value("gpu", "");
  if (auto it = j.find("waiting"); it != j.end() && it->is_array())
    for (const auto& w : *it)
      if (w.is_string()) f.waiting.push_back(w.get<std::string>());
  return f;
}

struct SignalEntry {
  int number;
  const char* name;
};
constexpr SignalEntry kSignals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
};

}  // namespace

WorkerFailure make_failure(const FailureSite& site, int exit_code, std::string reason,
                           double timestamp) {
  WorkerFailure f;
  f.node_rank = site.node_rank;
  f.local_rank = site.local_rank;
  f.global_rank = site.global_rank;
  f.host = site.host;
  f.pid = site.pid;
  f.exit_code = exit_code;
  f.timestamp = timestamp > 0 ? timestamp : wall_clock_now();
  f.reason = std::move(reason);
  f.message = f.reason;
  return f;
}

ExitDescription describe_exit(int st) {
  ExitDescription d;
  if (WIFSIGNALED(st)) {
    const int sig = WTERMSIG(st);
    d.failed = true;
    d.exit_code = -sig;
    d.reason = "killed by " + signal_name(sig) + " (signal " + std::to_string(sig) + ")";
  } else if (WIFEXITED(st)) {
    d.exit_code = WEXITSTATUS(st);
    d.failed = d.exit_code != 0;
    d.reason = "exited with code " + std::to_string(d.exit_code);
  }
  return d;
}

double wall_clock_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string to_json(const WorkerFailure& f) {
  return json_text(failure_json(f));
}

std::string to_json(const std::vector<WorkerFailure>& fs) {
  json a = json::array();
  for (const auto& f : fs) a.push_back(failure_json(f));
  return json_text(a);
}

std::string to_json(const Outcome& o) {
  static const char* kinds[] = {"succeeded", "failed", "aborted", "rescale"};
  json j{{"kind", kinds[o.kind]},
         {"node_rank", o.node_rank},
         {"restarts", o.restarts},
         {"detail", o.detail}};
  if (o.first_failure) j["first_failure"] = failure_json(*o.first_failure);
  if (o.decided_at > 0) j["decided_at"] = o.decided_at;
  return json_text(j);
}

WorkerFailure failure_from_json(const std::string& text) {
  try {
    return failure_from(json::parse(text));
  } catch (const std::exception& e) {
    throw ProtocolError(std::string("malformed failure record in the store: ") + e.what());
  }
}

std::vector<WorkerFailure> failures_from_json(const std::string& text) {
  try {
    std::vector<WorkerFailure> out;
    for (const auto& j : json::parse(text)) out.push_back(failure_from(j));
    return out;
  } catch (const std::exception& e) {
    throw ProtocolError(std::string("malformed failure list in the store: ") + e.what());
  }
}

Outcome outcome_from_json(const std::string& text) {
  try {
    json j = json::parse(text);
    Outcome o;
    std::string kind = j.at("kind").get<std::string>();
    if (kind == "succeeded")
      o.kind = Outcome::kSucceeded;
    else if (kind == "failed")
      o.kind = Outcome::kFailed;
    else if (kind == "aborted")
      o.kind = Outcome::kAborted;
    else if (kind == "rescale")
      o.kind = Outcome::kRescale;
    else
      throw ProtocolError("unknown kind '" + kind + "'");
    o.node_rank = json_number::field<int>(j, "node_rank", 0);
    o.restarts = json_number::field<int>(j, "restarts", 0);
    o.detail = j.value("detail", "");
    if (j.contains("first_failure")) o.first_failure = failure_from(j["first_failure"]);
    o.decided_at = j.value("decided_at", 0.0);
    return o;
  } catch (const std::exception& e) {
    throw ProtocolError(std::string("malformed outcome record in the store: ") + e.what());
  }
}

std::string signal_name(int sig) {
  for (const auto& s : kSignals)
    if (s.number == sig) return s.name;
  return "SIG" + std::to_string(sig);
}

int signal_number(const std::string& text) {
  std::string name = text;
  while (!name.empty() && name.front() == ' ') name.erase(name.begin());
  while (!name.empty() && name.back() == ' ') name.pop_back();
  if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0])))
    return parse_int(name, 1, NSIG - 1).value_or(0);
  if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
  for (const auto& s : kSignals)
    if (name == s.name) return s.number;
  return 0;
}

}  // namespace cohort::launch
