// Ring reduce-scatter over TCP: the first half of the ring allreduce, shifted by one so that
// member i ends with block i. In step s a member sends its partial sum of block (me - 1 - s) and
// receives the predecessor's partial sum of block (me - 2 - s), folding its own input block into it
// as it arrives; the last step's fold is block `me`, written straight to `out`. Partial sums
// alternate between two scratch buffers so the one being sent is never overwritten.
#include <cstring>

#include "cpu/algorithms.h"

namespace cohort::detail {
namespace {
constexpr size_t kGranule = 256 * 1024;
}

void tcp_reduce_scatter_ring(TcpMesh& mesh, const void* in, void* out, size_t count, DataType type,
                             Op op, std::vector<char>& scratch, const Call& call) {
  const int n = mesh.size();
  const int me = mesh.index();
  const size_t esize = dtype_size(type);
  const size_t bytes = count * esize;
  const char* src = static_cast<const char*>(in);
  if (n == 1) {
    if (out != in && bytes > 0) std::memmove(out, in, bytes);
    return;
  }
  if (count == 0) return;
  scratch.resize(std::max(scratch.size(), 3 * bytes));
  char* partial[2] = {scratch.data(), scratch.data() + bytes};
  char* recv = scratch.data() + 2 * bytes;
  TcpPair* next = mesh.pair((me + 1) % n);
  TcpPair* prev = mesh.pair((me + n - 1) % n);
  auto block = [&](int b) { return src + static_cast<size_t>(((b % n) + n) % n) * bytes; };

  const char* sending = block(me - 1);
  for (int s = 0; s < n - 1; ++s) {
    const char* own = block(me - 2 - s);
    char* dst = s == n - 2 ? static_cast<char*>(out) : partial[s % 2];
    Transfer t[2];
    t[0].pair = next;
    t[0].send = true;
    t[0].data = const_cast<char*>(sending);
    t[0].bytes = bytes;
    t[1].pair = prev;
    t[1].data = recv;
    t[1].bytes = bytes;
    t[1].granule = kGranule;
    size_t folded = 0;
    t[1].on_progress = [&](size_t, size_t to) {
      const size_t upto = to / esize;
      reduce2(dst + folded * esize, recv + folded * esize, own + folded * esize, upto - folded,
              type, op);
      folded = upto;
    };
    run_transfers(t, call);
    sending = dst;
  }
}

}  // namespace cohort::detail
