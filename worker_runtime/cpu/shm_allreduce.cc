// Allreduce through shared memory, in rounds of one slot (DeepSpeed's "distributed" SHM reduce,
// with the owner's own slice never copied in or out):
//
//   copy in    each rank copies the slices it does not own into its slot of this round's parity
//   barrier
//   reduce     each owner folds its slice: its private data plus every peer's slot, into its
//              private buffer; (hierarchical) allreduces it across hosts; copies it into its slot
//   barrier
//   copy out   each rank copies the slices it does not own from their owners' slots
//
// Why two parities suffice without a third barrier: round k+2 writes the slots of round k, but a
// rank only starts round k+2 after the second barrier of round k+1, which every rank reaches after
// finishing its copy-out of round k.
//
// Memory traffic per rank for S bytes and L ranks: (L-1)/L S in, S/L (private) + (L-1)/L S (slots)
// read and S/L written by the fold, (L-1)/L S out. A slot is small enough (1 MiB by default) to
// stay in cache between the copy-in and the peers' reads, so DRAM sees little more than one read
// and one write of the private buffer.
#include <cstring>

#include "cpu/algorithms.h"

namespace cohort::detail {

Range split(size_t count, int parts, int i, size_t elem_size) {
  const size_t align = std::max<size_t>(1, 64 / elem_size);
  size_t per = (count + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
  per = (per + align - 1) / align * align;
  Range r;
  r.begin = std::min(count, per * static_cast<size_t>(i));
  r.end = std::min(count, r.begin + per);
  return r;
}

void shm_allreduce(ShmWorld& world, void* data, size_t count, DataType type, Op op, int divisor,
                   int owners, const SliceHook& cross, const Call& call) {
  const size_t esize = dtype_size(type);
  const size_t chunk = world.slot_bytes() / esize;
  const int me = world.local_rank();
  const int n = world.local_size();
  const bool owner = me < owners;
  char* base = static_cast<char*>(data);
  std::vector<const void*> srcs(static_cast<size_t>(n));

  for (size_t done = 0; done < count; done += chunk) {
    const size_t len = std::min(chunk, count - done);
    char* mine = base + done * esize;
    const int p = world.next_parity();
    char* my_slot = world.slot(me, p);

    for (int j = 0; j < owners; ++j) {
      if (j == me) continue;
      const Range r = split(len, owners, j, esize);
      std::memcpy(my_slot + r.begin * esize, mine + r.begin * esize, r.size() * esize);
    }
    world.barrier(call);

    if (owner) {
      const Range r = split(len, owners, me, esize);
      if (r.size() > 0) {
        char* dst = mine + r.begin * esize;
        int k = 0;
        srcs[k++] = dst;
        for (int q = 0; q < n; ++q) {
          if (q != me) srcs[k++] = world.slot(q, p) + r.begin * esize;
        }
        reduce(dst, srcs.data(), k, r.size(), type, op);
        if (cross) cross(dst, r.size());
        divide(dst, r.size(), type, divisor);
        std::memcpy(my_slot + r.begin * esize, dst, r.size() * esize);
      }
    }
    world.barrier(call);

    for (int j = 0; j < owners; ++j) {
      if (j == me) continue;
      const Range r = split(len, owners, j, esize);
      std::memcpy(mine + r.begin * esize, world.slot(j, p) + r.begin * esize, r.size() * esize);
    }
  }
}

}  // namespace cohort::detail
