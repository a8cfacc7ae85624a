// cohort::train::Comm: the collectives a data-parallel trainer needs, over a cohort::ProcessGroup
// (or none, for one process).
//
// Gradients live on the model's Device. When the group reduces device memory itself (the NCCL
// group) they are reduced in place, and host values (losses, checksums, strings) go through a
// device buffer; otherwise (the CPU group, or a CUDA model in a CPU group) device buffers are
// staged through one host buffer. Sums are returned, never averages: the trainers fold 1/world
// into the optimiser's gradient scale, which saves a pass over the gradients.
//
// Thread safety: none; used by the training thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cohort/process_group.h"
#include "cohort/train/device.h"

namespace cohort::train {

class Comm {
 public:
  // One process: every collective is the identity.
  Comm() = default;
  // Over `pg` (must outlive the Comm) for buffers on `dev`; `pg_uses_device_memory` says the group
  // takes `dev`'s pointers directly (NCCL).
  Comm(cohort::ProcessGroup& pg, Device& dev, bool pg_uses_device_memory);

  int rank() const { return pg_ ? pg_->rank() : 0; }
  int world() const { return pg_ ? pg_->size() : 1; }
  // The gradients' path, for logs: "one process", "NCCL", "CPU group" or "CPU group, staged
  // through host memory" (a GPU model in a CPU group).
  const char* describe() const;

  // Sums `n` floats of `dev_buf` (on the Device) across ranks, in place. One collective.
  void allreduce_sum(float* dev_buf, size_t n);
  // Sums host doubles across ranks, in place.
  void allreduce_sum(double* host, size_t n);
  // Copies `root`'s n floats (on the Device) to every rank.
  void broadcast(float* dev_buf, size_t n, int root = 0);
  // Copies rank `root`'s string to every rank (two collectives: length, then bytes).
  void broadcast(std::string& s, int root = 0);
  // Throws cohort::Error on every rank when `value` differs from rank 0's on any rank; `what` names
  // the value in the message ("initial weights checksum").
  void check_same(uint64_t value, const std::string& what);
  void barrier();

 private:
  // Collectives on host values, through a device buffer when the group only takes device memory.
  void host_allreduce(void* host, size_t count, DataType dtype, ReduceOp op);
  void host_broadcast(void* host, size_t count, DataType dtype, int root);

  cohort::ProcessGroup* pg_ = nullptr;
  Device* dev_ = nullptr;
  bool direct_ = false;           // device buffers go to the group as they are
  bool host_via_device_ = false;  // host values must be copied to the device first
  std::vector<float> staging_;
};

// crc32 of `n` floats on `dev` (downloaded first).
uint32_t device_checksum(Device& dev, const float* buf, size_t n);

}  // namespace cohort::train
