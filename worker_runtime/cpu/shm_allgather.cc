// Allgather through shared memory: per round every rank copies the next piece of its block into
// its slot, a barrier, every rank copies every piece out (parity argument: shm_allreduce_small.cc).
#include <cstring>

#include "cpu/algorithms.h"

namespace cohort::detail {

void shm_allgather(ShmWorld& world, const void* in, void* out, size_t bytes, const Call& call) {
  const int me = world.local_rank();
  const int n = world.local_size();
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const bool in_place = src == dst + static_cast<size_t>(me) * bytes;
  for (size_t done = 0; done < bytes; done += world.slot_bytes()) {
    const size_t len = std::min(world.slot_bytes(), bytes - done);
    const int p = world.next_parity();
    std::memcpy(world.slot(me, p), src + done, len);
    world.barrier(call);
    for (int q = 0; q < n; ++q) {
      if (q == me && in_place) continue;
      std::memcpy(dst + static_cast<size_t>(q) * bytes + done, world.slot(q, p), len);
    }
  }
}

}  // namespace cohort::detail
