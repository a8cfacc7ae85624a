// cohort::ProcessGroup: collectives among a fixed set of ranks.
//
// Backends: the CPU group (shared memory between ranks on one host, TCP between hosts; see
// cpu_process_group.h) and the NCCL group (GPU buffers; nccl_process_group.h, built with CUDA).
// Every rank of a group calls the same collectives in the same order with the same counts.
// Buffers are contiguous; `count` is in elements. Host memory for the CPU group, device memory
// for NCCL. In-place use is allowed where stated.
//
// Every collective has a deadline (ProcessGroupOptions::timeout). When a peer dies or stops
// participating the call throws cohort::CollectiveError naming the operation, the group size, the
// elapsed time and, when known, the rank that did not answer, instead of hanging.
//
// Thread safety: a ProcessGroup is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "cohort/types.h"

namespace cohort {

// A collective failed or timed out. missing_rank() is the global rank that did not answer, or -1.
class CollectiveError : public virtual Error {
 public:
  CollectiveError(const std::string& what, int missing_rank)
      : Error(what), missing_rank_(missing_rank) {}
  int missing_rank() const { return missing_rank_; }

 private:
  int missing_rank_;
};

struct ProcessGroupOptions {
  // Deadline of each collective. Default like PyTorch's CPU backends: 30 minutes; overridden by
  // COHORT_TIMEOUT_S (seconds) in the environment when the group is built from a Context.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // CPU group: reduce through POSIX shared memory between ranks on the same host. Off forces TCP
  // everywhere (tests use it to exercise the multi-host path on one machine).
  bool use_shared_memory = true;

  // CPU group, TCP links: the address this rank listens on for peers on other hosts. Empty: from
  // a Context, COHORT_SOCKET_ADDR or the local address that routes to MASTER_ADDR; otherwise
  // 127.0.0.1 (enough when every "host" is on this machine, e.g. with use_shared_memory = false).
  std::string listen_host;
  // CPU group: names the shared-memory segments ("/cohort-<tag>-<token>-h<host>"). Empty: from a
  // Context, "<run id>-<restart count>"; otherwise "pg".
  std::string segment_tag;
  // CPU group: bytes per rank and round in the shared-memory segment (rounded up to 4 KiB; 0 = 1
  // MiB). Exists for tests, which make it tiny to exercise many rounds with small buffers. Every
  // rank of a group must use the same value.
  size_t shm_slot_bytes = 0;
  // CPU group: allreduces up to this many bytes use the latency algorithms (one-barrier shared
  // memory, direct TCP exchange); -1 = the defaults. Exists for tests and benchmarks. Every rank of
  // a group must use the same value.
  int64_t small_message_bytes = -1;

  // NCCL group: the cudaStream_t collectives are ordered on (nullptr = the legacy default stream,
  // which orders them after all earlier work of the device's blocking streams).
  void* cuda_stream = nullptr;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  // This process's rank in the group, and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Reduces `data` across ranks in place; every rank ends with the result.
  virtual void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) = 0;

  // Copies `root`'s buffer into every rank's buffer.
  virtual void broadcast(void* data, size_t count, DataType dtype, int root) = 0;

  // Gathers `count` elements from each rank into `out` (size() * count elements, rank order).
  virtual void allgather(const void* in, void* out, size_t count, DataType dtype) = 0;

  // Reduces `in` (size() * count elements) across ranks; rank r receives slice r (count elements).
  virtual void reduce_scatter(const void* in, void* out, size_t count, DataType dtype,
                              ReduceOp op) = 0;

  // Returns once every rank has entered the barrier.
  virtual void barrier() = 0;

  // A group of the listed ranks of this group (sorted, unique). Every rank of this group must call
  // it with the same list; ranks outside the list get nullptr.
  virtual std::unique_ptr<ProcessGroup> new_group(std::vector<int> ranks) = 0;

  // Typed conveniences.
  template <typename T>
  void allreduce(std::span<T> data, ReduceOp op) {
    allreduce(data.data(), data.size(), DataTypeOf<T>::value, op);
  }
  template <typename T>
  void broadcast(std::span<T> data, int root) {
    broadcast(data.data(), data.size(), DataTypeOf<T>::value, root);
  }
};

}  // namespace cohort
