// Shared-memory segments: the sweep of segments whose creator died.
#include "cpu/shm_segment.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu/shm_sync.h"

namespace cohort::detail {
namespace {

TEST(ShmSegment, SweepRemovesSegmentsOfDeadCreatorsOnly) {
  // A segment whose recorded creator is a reaped child (certainly dead) and one of ours.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string dead = "/cohort-sweeptest-dead-" + std::to_string(::getpid());
  const std::string live = "/cohort-sweeptest-live-" + std::to_string(::getpid());
  {
    ShmSegment d = ShmSegment::create(dead, 8192);
    static_cast<ShmHeader*>(d.data())->magic = kShmMagic;
    static_cast<ShmHeader*>(d.data())->creator_pid = child;
    ShmSegment l = ShmSegment::create(live, 8192);
    static_cast<ShmHeader*>(l.data())->magic = kShmMagic;
    static_cast<ShmHeader*>(l.data())->creator_pid = ::getpid();
    EXPECT_GE(sweep_stale_segments(), 1);
    EXPECT_NE(::access(("/dev/shm" + live).c_str(), F_OK), -1);
    EXPECT_EQ(::access(("/dev/shm" + dead).c_str(), F_OK), -1);
  }
  EXPECT_EQ(::access(("/dev/shm" + live).c_str(), F_OK), -1);  // the creator's handle unlinked it
}

}  // namespace
}  // namespace cohort::detail
