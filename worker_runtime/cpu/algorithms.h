// The CPU collectives' algorithms, one per file, each over one transport: ShmWorld (same host) or
// TcpMesh (across hosts). CpuProcessGroup picks and composes them (topology.h); the algorithms
// throw PeerFailure and never decide whom to blame.
//
// Conventions: counts are in elements of `type`; `bytes` variants move raw bytes; `divisor` > 1
// turns a sum into an average on the rank that finishes each element. Every algorithm returns at
// once for a zero-sized buffer without touching its transport, so all ranks stay in step (they all
// see the same size).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "cpu/collective.h"
#include "cpu/reduce_kernels.h"
#include "cpu/shm_sync.h"
#include "cpu/tcp_mesh.h"

namespace cohort::detail {

// ---- shared memory ---------------------------------------------------------------------------

// Called by a slice owner of shm_allreduce on its locally reduced slice (in private memory)
// before the slice is shared: the hierarchical mode's cross-host step.
using SliceHook = std::function<void(void* slice, size_t count)>;

// Reduce-scatter then allgather through the segment, in rounds of one slot. Each of the first
// `owners` local ranks reduces one slice of the round; the others only contribute. Bandwidth-
// bound: each byte is copied in once, reduced once, copied out once. (shm_allreduce.cc)
void shm_allreduce(ShmWorld& world, void* data, size_t count, DataType type, Op op, int divisor,
                   int owners, const SliceHook& cross, const Call& call);

// Every rank copies its buffer in, then folds all of them: one barrier per round instead of two,
// for latency-bound sizes. (shm_allreduce_small.cc)
void shm_allreduce_small(ShmWorld& world, void* data, size_t count, DataType type, Op op,
                         int divisor, const Call& call);

// Local rank `root` copies its bytes in; the others copy them out. (shm_broadcast.cc)
void shm_broadcast(ShmWorld& world, void* data, size_t bytes, int root, const Call& call);

// out = every local rank's `bytes` bytes, in local-rank order. (shm_allgather.cc)
void shm_allgather(ShmWorld& world, const void* in, void* out, size_t bytes, const Call& call);

// in holds local_size blocks of `count`; this rank's block of the reduction lands in out.
// (shm_reduce_scatter.cc)
void shm_reduce_scatter(ShmWorld& world, const void* in, void* out, size_t count, DataType type,
                        Op op, int divisor, const Call& call);

// ---- TCP ---------------------------------------------------------------------------------------

// Ring reduce-scatter then ring allgather; every member ends bit-identical. Bandwidth-optimal for
// large buffers: each member sends 2 (n-1)/n of the buffer. (tcp_allreduce_ring.cc)
void tcp_allreduce_ring(TcpMesh& mesh, void* data, size_t count, DataType type, Op op,
                        std::vector<char>& scratch, const Call& call);

// Every member sends its buffer to every other and folds all of them in member order: one round
// trip, for small buffers. (tcp_allreduce_direct.cc)
void tcp_allreduce_direct(TcpMesh& mesh, void* data, size_t count, DataType type, Op op,
                          std::vector<char>& scratch, const Call& call);

// Member `root`'s bytes to every member: direct sends for small buffers, a pipelined chain for
// large ones. (tcp_broadcast.cc)
void tcp_broadcast(TcpMesh& mesh, void* data, size_t bytes, int root, const Call& call);

// Ring allgather of `bytes` per member into out (member order). (tcp_allgather_ring.cc)
void tcp_allgather_ring(TcpMesh& mesh, const void* in, void* out, size_t bytes, const Call& call);

// Ring reduce-scatter: in holds one block of `count` per member, member i gets block i.
// (tcp_reduce_scatter_ring.cc)
void tcp_reduce_scatter_ring(TcpMesh& mesh, const void* in, void* out, size_t count, DataType type,
                             Op op, std::vector<char>& scratch, const Call& call);

// Dissemination barrier: ceil(log2 n) rounds of one byte. (tcp_barrier.cc)
void tcp_barrier(TcpMesh& mesh, const Call& call);

// ---- helpers -----------------------------------------------------------------------------------

// Element range [begin, end) of part `i` of `parts` near-equal parts of `count`, each part but the
// last starting on a 64-byte boundary of an aligned buffer.
struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};
Range split(size_t count, int parts, int i, size_t elem_size);

}  // namespace cohort::detail
