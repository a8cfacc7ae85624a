// Reduce-scatter through shared memory: per round every rank copies, for each peer q, the next
// piece of block q of its input into region q of its slot; a barrier; each rank folds its own block
// (its private piece plus region `me` of every peer's slot) into its output. Parity argument as in
// shm_allreduce_small.cc.
#include <cstring>

#include "cohort/error.h"
#include "cpu/algorithms.h"

namespace cohort::detail {

void shm_reduce_scatter(ShmWorld& world, const void* in, void* out, size_t count, DataType type,
                        Op op, int divisor, const Call& call) {
  const size_t esize = dtype_size(type);
  const int me = world.local_rank();
  const int n = world.local_size();
  // Regions are 64-byte aligned so that no two ranks' regions share a cache line.
  const size_t region_bytes = world.slot_bytes() / static_cast<size_t>(n) / 64 * 64;
  const size_t chunk = region_bytes / esize;
  if (chunk == 0) throw Error("cohort: shared-memory slot too small for reduce_scatter");
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (size_t done = 0; done < count; done += chunk) {
    const size_t len = std::min(chunk, count - done);
    const int p = world.next_parity();
    char* my_slot = world.slot(me, p);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      std::memcpy(my_slot + static_cast<size_t>(q) * region_bytes,
                  src + (static_cast<size_t>(q) * count + done) * esize, len * esize);
    }
    world.barrier(call);
    int k = 0;
    srcs[k++] = src + (static_cast<size_t>(me) * count + done) * esize;
    for (int q = 0; q < n; ++q) {
      if (q != me) srcs[k++] = world.slot(q, p) + static_cast<size_t>(me) * region_bytes;
    }
    reduce(dst + done * esize, srcs.data(), k, len, type, op);
    divide(dst + done * esize, len, type, divisor);
  }
}

}  // namespace cohort::detail
