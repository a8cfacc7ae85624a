// Dissemination barrier over TCP: in round k (k = 1, 2, 4, ...) a member sends one byte to
// member (me + k) and waits for one from member (me - k). After ceil(log2 n) rounds every member
// has (transitively) heard from every other.
#include "cpu/algorithms.h"

namespace cohort::detail {

void tcp_barrier(TcpMesh& mesh, const Call& call) {
  const int n = mesh.size();
  const int me = mesh.index();
  for (int k = 1; k < n; k *= 2) {
    char out = 'b', in = 0;
    exchange(mesh.pair((me + k) % n), &out, 1, mesh.pair((me - k % n + n) % n), &in, 1, call);
  }
}

}  // namespace cohort::detail
