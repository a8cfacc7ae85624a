// Allreduce through shared memory for latency-bound sizes: every rank copies its whole round into
// its slot, one barrier, then every rank folds all slots (in local-rank order, so every rank
// computes the same bits) into its own buffer. One barrier per round instead of two; the fold is
// repeated on every rank, which costs nothing at these sizes. The next round uses the other
// parity, and a rank only rewrites this parity after the next round's barrier, which every rank
// passes after folding this one.
#include <cstring>

#include "cpu/algorithms.h"

namespace cohort::detail {

void shm_allreduce_small(ShmWorld& world, void* data, size_t count, DataType type, Op op,
                         int divisor, const Call& call) {
  const size_t esize = dtype_size(type);
  const size_t chunk = world.slot_bytes() / esize;
  const int n = world.local_size();
  std::vector<const void*> srcs(static_cast<size_t>(n));
  char* base = static_cast<char*>(data);
  for (size_t done = 0; done < count; done += chunk) {
    const size_t len = std::min(chunk, count - done);
    const int p = world.next_parity();
    std::memcpy(world.slot(world.local_rank(), p), base + done * esize, len * esize);
    world.barrier(call);
    for (int q = 0; q < n; ++q) srcs[q] = world.slot(q, p);
    reduce(base + done * esize, srcs.data(), n, len, type, op);
    divide(base + done * esize, len, type, divisor);
  }
}

}  // namespace cohort::detail
