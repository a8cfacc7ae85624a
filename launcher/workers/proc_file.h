// Reading /proc/<pid>/... files of processes that may exit while they are read.
//
// std::ifstream is the wrong tool there: a read that fails (ESRCH once the process is gone) makes
// libstdc++'s filebuf throw std::ios_base::failure from inside an istreambuf_iterator or getline,
// which took a whole cohortrun down when a child exited mid-scan.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace cohort::launch {

// The file's bytes (up to 1 MiB), or what could be read before an error; "" when it cannot be
// opened. Never throws.
std::string read_proc_file(const std::string& path);

// The fields of /proc/<pid>/stat after the command name, so that element 0 is field 3 (state) of
// proc(5); empty when the process is gone. Never throws.
std::vector<std::string> proc_stat_fields(pid_t pid);

}  // namespace cohort::launch
