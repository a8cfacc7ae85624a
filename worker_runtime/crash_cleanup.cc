#include "crash_cleanup.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

namespace cohort::detail {
namespace {

constexpr int kSlots = 64;
constexpr size_t kPathMax = 256;

// States: 0 free, 1 being written, 2 registered.
struct Slot {
  std::atomic<int> state{0};
  char path[kPathMax];
};

// Process-wide by nature: a signal handler has nowhere else to look.
Slot g_slots[kSlots];

}  // namespace

int register_crash_file(std::string_view path) noexcept {
  if (path.empty() || path.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
      std::memcpy(g_slots[i].path, path.data(), path.size());
      g_slots[i].path[path.size()] = '\0';
      g_slots[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unregister_crash_file(int handle) noexcept {
  if (handle < 0 || handle >= kSlots) return;
  g_slots[handle].state.store(0, std::memory_order_release);
}

void run_crash_cleanup() noexcept {
  for (int i = 0; i < kSlots; ++i) {
    if (g_slots[i].state.load(std::memory_order_acquire) == 2) ::unlink(g_slots[i].path);
  }
}

}  // namespace cohort::detail
