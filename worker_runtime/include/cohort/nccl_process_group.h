// The NCCL process group: collectives over GPU memory (built when CUDA and NCCL are found;
// COHORT_HAVE_NCCL is then defined for users of libcohort).
//
// Bootstrap: cudaSetDevice(device) (from a Context: the device given, else local_rank modulo the
// visible devices); rank 0 creates the NCCL unique id and publishes it in the store under
// "nccl_uid/<run id>/<restart count>/<communicator sequence>" (as PyTorch's ProcessGroupNCCL
// broadcasts it), the others wait for it with the store's timeout; the communicator is
// initialised non-blocking (ncclCommInitRankConfig with config.blocking = 0, NCCL >= 2.14) and
// polled against the group's deadline (docs/NCCL.md).
//
// Every collective is enqueued on options.cuda_stream (default: the legacy default stream) and the
// calling thread waits for it, polling the CUDA event and ncclCommGetAsyncError() against the
// deadline. On an NCCL error or a timeout the communicator is aborted (ncclCommAbort) and the call
// throws CollectiveError (missing_rank() is -1: NCCL does not say which peer failed); the group is
// unusable afterwards. Buffers are device pointers.
//
// Heartbeats: every collective calls cohort::heartbeat() on entry and on completion.
// Thread safety: as ProcessGroup (one thread at a time).
#pragma once

#include <memory>
#include <string>

#include "cohort/context.h"
#include "cohort/error.h"
#include "cohort/process_group.h"

namespace cohort {

// A NCCL group of every rank of `context` on device local_rank. Collective call (every rank, same
// order as its other group creations). `context` must outlive the group. COHORT_TIMEOUT_S
// overrides options.timeout. Throws CollectiveError (timeout, NCCL error) or CudaError.
std::unique_ptr<ProcessGroup> new_nccl_process_group(Context& context,
                                                     const ProcessGroupOptions& options = {});

// The same on CUDA device `device` of this process (0 <= device < the visible devices): the
// device the caller's buffers and options.cuda_stream belong to, which the group leaves current.
// A trainer passes its model's device, so that both agree whatever CUDA_VISIBLE_DEVICES or
// --device cuda:N chose. Throws CudaError for a device that is not visible.
std::unique_ptr<ProcessGroup> new_nccl_process_group(Context& context, int device,
                                                     const ProcessGroupOptions& options);

// The same over an explicit store: ranks 0..size-1 on `device` each, the unique id under
// `uid_key`. `store` must outlive the call.
std::unique_ptr<ProcessGroup> new_nccl_process_group(Store& store, int rank, int size, int device,
                                                     const ProcessGroupOptions& options,
                                                     const std::string& uid_key);

}  // namespace cohort
