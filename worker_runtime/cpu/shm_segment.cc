#include "cpu/shm_segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <utility>

#include "cohort/error.h"
#include "cpu/shm_sync.h"
#include "crash_cleanup.h"

namespace cohort::detail {
namespace {

std::string sys_error(const std::string& what, const std::string& name, int err) {
  return "cohort: " + what + " shared-memory segment " + name + ": " + std::strerror(err);
}

bool process_gone(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  // A zombie answers kill(); its state letter in /proc says it is dead.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(sys_error("cannot create", name, errno));
  ShmSegment s;
  s.name_ = name;
  s.owns_name_ = true;
  s.crash_handle_ = register_crash_file("/dev/shm" + name);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(sys_error("cannot size (" + std::to_string(bytes) + " bytes)", name, err));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw Error(sys_error("cannot map", name, err));
  s.data_ = p;
  s.size_ = bytes;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(sys_error("cannot open", name, errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    throw Error("cohort: shared-memory segment " + name + " has " + std::to_string(st.st_size) +
                " bytes, expected " + std::to_string(bytes));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw Error(sys_error("cannot map", name, err));
  ShmSegment s;
  s.name_ = name;
  s.data_ = p;
  s.size_ = bytes;
  return s;
}

void ShmSegment::remove(const std::string& name) noexcept {
  ::shm_unlink(name.c_str());
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept {
  *this = std::move(other);
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_name_ = std::exchange(other.owns_name_, false);
    crash_handle_ = std::exchange(other.crash_handle_, -1);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  release();
}

void ShmSegment::release() noexcept {
  unlink();
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

void ShmSegment::unlink() noexcept {
  if (owns_name_) {
    ::shm_unlink(name_.c_str());
    owns_name_ = false;
  }
  unregister_crash_file(crash_handle_);
  crash_handle_ = -1;
}

int sweep_stale_segments() noexcept {
  int removed = 0;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  while (dirent* e = ::readdir(dir)) {
    if (std::strncmp(e->d_name, "cohort-", 7) != 0) continue;
    const std::string name = std::string("/") + e->d_name;
    const int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) continue;
    struct stat st {};
    int creator = 0;
    bool ours = false;
    if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(ShmHeader)) {
      void* p = ::mmap(nullptr, sizeof(ShmHeader), PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        const auto* h = static_cast<const ShmHeader*>(p);
        ours = h->magic == kShmMagic || h->magic == 0;
        creator = h->creator_pid;
        ::munmap(p, sizeof(ShmHeader));
      }
    }
    ::close(fd);
    if (ours && process_gone(creator)) {
      ::shm_unlink(name.c_str());
      ++removed;
    }
  }
  ::closedir(dir);
  return removed;
}

}  // namespace cohort::detail
