// Ring allgather over TCP: in step s a member sends block (me - s) to its successor and receives
// block (me - s - 1) from its predecessor; after n-1 steps it has every block.
#include <cstring>

#include "cpu/algorithms.h"

namespace cohort::detail {

void tcp_allgather_ring(TcpMesh& mesh, const void* in, void* out, size_t bytes, const Call& call) {
  const int n = mesh.size();
  const int me = mesh.index();
  char* base = static_cast<char*>(out);
  char* mine = base + static_cast<size_t>(me) * bytes;
  if (in != mine && bytes > 0) std::memmove(mine, in, bytes);
  if (n == 1 || bytes == 0) return;
  TcpPair* next = mesh.pair((me + 1) % n);
  TcpPair* prev = mesh.pair((me + n - 1) % n);
  for (int s = 0; s < n - 1; ++s) {
    const size_t send_block = static_cast<size_t>(((me - s) % n + n) % n);
    const size_t recv_block = static_cast<size_t>(((me - s - 1) % n + n) % n);
    exchange(next, base + send_block * bytes, bytes, prev, base + recv_block * bytes, bytes, call);
  }
}

}  // namespace cohort::detail
