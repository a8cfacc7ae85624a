// Direct allreduce over TCP for small buffers: every member sends its whole buffer to every other
// member at once and folds all n buffers in member order (so every member computes the same bits).
// One round trip instead of the ring's 2 (n-1) steps; n-1 times the ring's traffic, which is
// nothing at these sizes.
#include <cstring>

#include "cpu/algorithms.h"

namespace cohort::detail {

void tcp_allreduce_direct(TcpMesh& mesh, void* data, size_t count, DataType type, Op op,
                          std::vector<char>& scratch, const Call& call) {
  const int n = mesh.size();
  if (n == 1 || count == 0) return;
  const int me = mesh.index();
  const size_t bytes = count * dtype_size(type);
  scratch.resize(std::max(scratch.size(), bytes * static_cast<size_t>(n)));
  std::vector<Transfer> t;
  t.reserve(static_cast<size_t>(2 * (n - 1)));
  for (int i = 0; i < n; ++i) {
    if (i == me) continue;
    Transfer send;
    send.pair = mesh.pair(i);
    send.send = true;
    send.data = static_cast<char*>(data);
    send.bytes = bytes;
    t.push_back(send);
    Transfer recv;
    recv.pair = mesh.pair(i);
    recv.data = scratch.data() + static_cast<size_t>(i) * bytes;
    recv.bytes = bytes;
    t.push_back(recv);
  }
  run_transfers(t, call);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    srcs[i] = i == me ? data : scratch.data() + static_cast<size_t>(i) * bytes;
  }
  reduce(data, srcs.data(), n, count, type, op);
}

}  // namespace cohort::detail
