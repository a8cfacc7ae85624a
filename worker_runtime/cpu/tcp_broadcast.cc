// Broadcast over TCP. Small buffers (or two members): the root sends to every member directly.
// Large buffers: a chain in ring order from the root, each member forwarding bytes to its
// successor as they arrive, so the time is about one buffer's transfer plus n hops of latency.
#include "cpu/algorithms.h"

namespace cohort::detail {
namespace {
constexpr size_t kDirectMax = 64 * 1024;
}

void tcp_broadcast(TcpMesh& mesh, void* data, size_t bytes, int root, const Call& call) {
  const int n = mesh.size();
  if (n == 1 || bytes == 0) return;
  const int me = mesh.index();
  char* p = static_cast<char*>(data);
  if (bytes <= kDirectMax || n == 2) {
    if (me != root) {
      exchange(nullptr, nullptr, 0, mesh.pair(root), p, bytes, call);
      return;
    }
    std::vector<Transfer> t;
    for (int i = 0; i < n; ++i) {
      if (i == root) continue;
      Transfer send;
      send.pair = mesh.pair(i);
      send.send = true;
      send.data = p;
      send.bytes = bytes;
      t.push_back(send);
    }
    run_transfers(t, call);
    return;
  }
  const int pos = (me - root + n) % n;
  TcpPair* next = pos + 1 < n ? mesh.pair((me + 1) % n) : nullptr;
  TcpPair* prev = pos > 0 ? mesh.pair((me + n - 1) % n) : nullptr;
  Transfer t[2];
  int k = 0;
  size_t* received = nullptr;
  if (prev != nullptr) {
    t[k].pair = prev;
    t[k].data = p;
    t[k].bytes = bytes;
    received = &t[k].done;
    ++k;
  }
  if (next != nullptr) {
    t[k].pair = next;
    t[k].send = true;
    t[k].data = p;
    t[k].bytes = bytes;
    t[k].available = received;  // null at the root: everything is there
    ++k;
  }
  run_transfers(std::span<Transfer>(t, k), call);
}

}  // namespace cohort::detail
