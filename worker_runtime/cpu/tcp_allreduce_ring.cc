// Ring allreduce over TCP (the bandwidth-optimal one; gloo's allreduce_ring_chunked without the
// double buffering): the buffer is cut into one block per member. Reduce-scatter: in step s a
// member sends block (me - s) to its successor and receives block (me - s - 1) from its
// predecessor, folding it into its own copy as the bytes arrive; after n-1 steps it holds the
// complete block (me + 1). Allgather: n-1 more steps pass the complete blocks around. Each block
// is folded by exactly one member and copied verbatim afterwards, so all members end identical.
#include <cstring>

#include "cpu/algorithms.h"

namespace cohort::detail {
namespace {
constexpr size_t kGranule = 256 * 1024;
}

void tcp_allreduce_ring(TcpMesh& mesh, void* data, size_t count, DataType type, Op op,
                        std::vector<char>& scratch, const Call& call) {
  const int n = mesh.size();
  if (n == 1 || count == 0) return;
  const int me = mesh.index();
  const size_t esize = dtype_size(type);
  TcpPair* next = mesh.pair((me + 1) % n);
  TcpPair* prev = mesh.pair((me + n - 1) % n);
  char* base = static_cast<char*>(data);
  scratch.resize(std::max(scratch.size(), split(count, n, 0, esize).size() * esize));

  for (int s = 0; s < n - 1; ++s) {
    const Range out = split(count, n, ((me - s) % n + n) % n, esize);
    const Range in = split(count, n, ((me - s - 1) % n + n) % n, esize);
    Transfer t[2];
    t[0].pair = next;
    t[0].send = true;
    t[0].data = base + out.begin * esize;
    t[0].bytes = out.size() * esize;
    t[1].pair = prev;
    t[1].data = scratch.data();
    t[1].bytes = in.size() * esize;
    t[1].granule = kGranule;
    size_t folded = 0;  // elements of `in` folded so far
    t[1].on_progress = [&](size_t, size_t to) {
      const size_t upto = to / esize;
      char* dst = base + (in.begin + folded) * esize;
      reduce2(dst, dst, scratch.data() + folded * esize, upto - folded, type, op);
      folded = upto;
    };
    run_transfers(t, call);
  }
  for (int s = 0; s < n - 1; ++s) {
    const Range out = split(count, n, ((me + 1 - s) % n + n) % n, esize);
    const Range in = split(count, n, ((me - s) % n + n) % n, esize);
    exchange(next, base + out.begin * esize, out.size() * esize, prev, base + in.begin * esize,
             in.size() * esize, call);
  }
}

}  // namespace cohort::detail
