// read_proc_file: /proc files of processes that may be gone by the time they are read.
#include "workers/proc_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

namespace cohort::launch {
namespace {

TEST(ProcFile, AReadThatFailsGivesWhatWasReadAndNeverThrows) {
  // A directory opens but every read fails (EISDIR), as a vanished process's stat does (ESRCH).
  // libstdc++'s filebuf throws there: the way a scan of /proc once ended a cohortrun.
  std::ifstream f("/proc/self");
  EXPECT_THROW(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()),
               std::ios_base::failure);
  EXPECT_EQ(read_proc_file("/proc/self"), "");
  EXPECT_EQ(read_proc_file("/proc/no-such-process/stat"), "");
  const std::string stat = read_proc_file("/proc/self/stat");
  EXPECT_EQ(stat.rfind(std::to_string(::getpid()) + " (", 0), 0u) << stat;
}

}  // namespace
}  // namespace cohort::launch
