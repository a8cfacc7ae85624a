#include "plan/entrypoint.h"

#include <unistd.h>

#include <sstream>

namespace cohort::launch {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_executable_file(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0;
}

// True when `name` is an executable path, or a bare command name found on PATH.
bool runs_directly(const std::string& name, const std::map<std::string, std::string>& env) {
  if (name.find('/') != std::string::npos) return is_executable_file(name);
  auto it = env.find("PATH");
  if (it == env.end()) return false;
  std::stringstream ss(it->second);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (!dir.empty() && is_executable_file(dir + "/" + name)) return true;
  }
  return false;
}

std::string basename_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The Python of the virtual environment this cohortrun is installed in (`pip install cohort` puts
// it in <venv>/bin beside python3; <venv>/pyvenv.cfg marks a venv), or "" when it is not in one.
// torchrun's workers run under sys.executable, its environment's Python, for the same reason.
std::string venv_python_beside_self() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  const std::string exe(buf, static_cast<size_t>(n));
  const std::string bin = exe.substr(0, exe.rfind('/'));
  const auto up = bin.rfind('/');
  if (up == std::string::npos || ::access((bin.substr(0, up) + "/pyvenv.cfg").c_str(), R_OK) != 0)
    return "";
  for (const char* name : {"python3", "python"}) {
    if (is_executable_file(bin + "/" + name)) return bin + "/" + name;
  }
  return "";
}

}  // namespace

WorkerCommand build_worker_command(const LaunchConfig& c,
                                   const std::map<std::string, std::string>& env) {
  WorkerCommand cmd;
  cmd.title = basename_of(c.training_script);
  bool direct = c.no_python || (!c.module && !ends_with(c.training_script, ".py") &&
                                runs_directly(c.training_script, env));
  if (!direct) {
    auto it = env.find("PYTHON_EXEC");
    if (it != env.end() && !it->second.empty()) {
      cmd.interpreter = it->second;
    } else if (std::string venv = venv_python_beside_self(); !venv.empty()) {
      cmd.interpreter = venv;
    } else {
      cmd.interpreter = "python3";
    }
    cmd.argv.push_back(cmd.interpreter);
    cmd.argv.push_back("-u");
    if (c.module) cmd.argv.push_back("-m");
  }
  cmd.argv.push_back(c.training_script);
  cmd.args_at = cmd.argv.size();
  cmd.argv.insert(cmd.argv.end(), c.training_script_args.begin(), c.training_script_args.end());
  return cmd;
}

}  // namespace cohort::launch
