// Reading /proc/<pid>/... files of processes that may exit while they are read.
//
// std::ifstream is the wrong tool there: a read that fails (ESRCH once the process is gone) makes
// libstdc++'s filebuf throw std::ios_base::failure from inside an istreambuf_iterator or getline,
// which took a whole cohortrun down when a child exited mid-scan.
#pragma once

#include <string>

namespace cohort::launch {

// The file's bytes (up to 1 MiB), or what could be read before an error; "" when it cannot be
// opened. Never throws.
std::string read_proc_file(const std::string& path);

}  // namespace cohort::launch
