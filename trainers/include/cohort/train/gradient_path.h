// How a data-parallel job's gradients cross ranks: through NCCL, straight from GPU memory, or
// through the CPU process group (host memory; a GPU model's gradients are then copied device ->
// host -> group -> device). Every rank must choose the same, or the ranks wait in different
// collectives until their timeout.
//
// NCCL needs every rank on a GPU of its own: it refuses two ranks of one communicator on one GPU.
// Counting GPUs per node does not tell: under the usual Slurm binding each rank sees one GPU
// (CUDA_VISIBLE_DEVICES per rank) while its node runs several ranks, and nodes with different GPU
// counts would each decide differently. So every rank publishes the identity of its GPU in the
// job's store (the machine and the GPU's PCI bus id), reads every rank's, and applies one rule to
// the same list: NCCL iff every rank has a GPU and no two ranks have the same one.
//
// Thread safety: the functions share no state; agree_gradient_path is a collective call.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "cohort/rdzv/store.h"

namespace cohort::train {

class Device;

struct GradientPath {
  bool nccl = false;
  std::string reason;  // one line for the log: why this path
};

// The rule, on every rank's GPU identity in rank order ("" for a rank without a GPU).
GradientPath decide_gradient_path(const std::vector<std::string>& gpu_ids);

// Publishes `my_gpu_id` (gpu_identity of this rank's device) under "<key_prefix><rank>" in
// `store`, waits up to `timeout` for every rank's and returns decide_gradient_path of them.
// Collective: every rank of the world calls it once with the same prefix; the prefix must be
// fresh (a store namespaced by restart round, as cohort::Context::store() is). Throws
// StoreTimeoutError when a rank does not publish in time.
GradientPath agree_gradient_path(Store& store, const std::string& key_prefix, int rank, int world,
                                 const std::string& my_gpu_id, std::chrono::milliseconds timeout);

// "<machine id>/<PCI bus id>" of `dev`'s GPU, "" when `dev` is not a GPU. The machine id is the
// kernel's boot id (/proc/sys/kernel/random/boot_id): the same for every container and network
// namespace of one host, which do share its GPUs; else the host name.
std::string gpu_identity(const Device& dev);
std::string machine_id();

}  // namespace cohort::train
