#include "failure/error_file.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace cohort::launch {

std::optional<ErrorFileContent> read_error_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return error_file::parse(ss.str());
}

void write_parent_error_file(const std::string& path, const std::optional<ErrorFileContent>& child,
                             const std::string& message, int exit_code) {
  const std::string text = error_file::encode_for_parent(child ? &*child : nullptr, message,
                                                         exit_code, std::time(nullptr));
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << text;
    if (!out.flush()) return;
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace cohort::launch
