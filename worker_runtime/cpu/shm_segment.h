// A POSIX shared-memory segment mapped into this process: the raw transport of the same-host
// collectives (shm_sync.h lays the group's state out inside it).
//
// Lifetime of the name: the creator registers it for removal on a crash (crash_cleanup.h) and
// unlink()s it as soon as every peer has mapped it, so from then on nothing can be left behind,
// whoever dies; until then, every failure path unlinks it, and sweep_stale_segments() removes
// segments whose creating process is gone (a SIGKILL inside that window).
//
// Thread safety: a ShmSegment is used by one thread at a time.
#pragma once

#include <cstddef>
#include <string>

namespace cohort::detail {

class ShmSegment {
 public:
  // Creates `name` (a "/cohort-..." POSIX name) exclusively with `bytes` bytes (zero-filled) and
  // maps it. Throws cohort::Error naming the segment and the system error.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Opens and maps an existing segment of exactly `bytes` bytes. Throws cohort::Error when it
  // does not exist or has another size.
  static ShmSegment open(const std::string& name, size_t bytes);
  // Removes `name` if it exists (any process may: names are unique per group and attempt).
  static void remove(const std::string& name) noexcept;

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  // Unmaps; the creator also unlinks the name if unlink() has not run.
  ~ShmSegment();

  // Removes the name (the mapping stays valid). Idempotent.
  void unlink() noexcept;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment() = default;
  void release() noexcept;

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owns_name_ = false;  // created here and not unlinked yet
  int crash_handle_ = -1;
};

// Removes /dev/shm segments named "cohort-*" whose creator process (recorded in their header by
// shm_sync.h) no longer exists: leftovers of a worker killed while setting a group up.
// Returns how many were removed. Never throws.
int sweep_stale_segments() noexcept;

}  // namespace cohort::detail
