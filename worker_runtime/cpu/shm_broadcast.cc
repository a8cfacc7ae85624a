// Broadcast through shared memory: per round the root copies one slot in, a barrier, the others
// copy it out (the parity argument of shm_allreduce_small.cc applies).
#include <cstring>

#include "cpu/algorithms.h"

namespace cohort::detail {

void shm_broadcast(ShmWorld& world, void* data, size_t bytes, int root, const Call& call) {
  char* base = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += world.slot_bytes()) {
    const size_t len = std::min(world.slot_bytes(), bytes - done);
    const int p = world.next_parity();
    if (world.local_rank() == root) std::memcpy(world.slot(root, p), base + done, len);
    world.barrier(call);
    if (world.local_rank() != root) std::memcpy(base + done, world.slot(root, p), len);
  }
}

}  // namespace cohort::detail
