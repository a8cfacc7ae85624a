#include "failure/error_file.h"

#include "failure/bounded_file.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>

namespace cohort::launch {

std::optional<ErrorFileContent> read_error_file(const std::string& path) {
  return error_file_content(read_bounded_file(path, kMaxErrorFileBytes));
}

std::optional<ErrorFileContent> error_file_content(BoundedFile f) {
  switch (f.status) {
    case BoundedFile::Status::kMissing:
      return std::nullopt;
    case BoundedFile::Status::kRead:
      return error_file::parse(f.text);
    case BoundedFile::Status::kTooLarge: {
      ErrorFileContent c;
      c.message = "the error file is " + std::to_string(f.size >> 20) + " MiB, over the " +
                  std::to_string(kMaxErrorFileBytes >> 20) +
                  " MiB cohortrun reads (above: its end)";
      c.traceback = std::move(f.text);  // the summary shows its last lines
      return c;
    }
    case BoundedFile::Status::kRefused:
      break;
  }
  ErrorFileContent c;
  c.message = "the error file " + f.problem + "; not read";
  return c;
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
