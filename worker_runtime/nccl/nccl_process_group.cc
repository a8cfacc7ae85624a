// NcclProcessGroup (see nccl_process_group.h). The host thread never blocks inside CUDA or NCCL:
// non-blocking communicators (config.blocking = 0) return ncclInProgress and are polled, and
// completion is an event polled together with ncclCommGetAsyncError, so a dead peer turns into an
// abort and an exception at the deadline instead of a hang.
#include "cohort/nccl_process_group.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "cohort/heartbeat.h"

namespace cohort {
namespace {

using Clock = std::chrono::steady_clock;

#define COHORT_CUDA_CHECK(call)                                                           \
  do {                                                                                    \
    const cudaError_t cohort_err_ = (call);                                               \
    if (cohort_err_ != cudaSuccess) {                                                     \
      throw CudaError(std::string("cohort: ") + #call + " failed at " + __FILE__ + ":" +  \
                      std::to_string(__LINE__) + ": " + cudaGetErrorString(cohort_err_)); \
    }                                                                                     \
  } while (0)

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", std::chrono::duration<double>(d).count());
  return buf;
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int size, int device, const ProcessGroupOptions& options)
      : rank_(rank), size_(size), device_(device), options_(options) {}
  ~NcclProcessGroup() override;

  // Initialises comm_ from `id` (non-blocking, polled until the deadline).
  void init(const ncclUniqueId& id);
  // Takes over a communicator produced by ncclCommSplit (already polled).
  void adopt(ncclComm_t comm);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(void* data, size_t count, DataType type, ReduceOp op) override;
  void broadcast(void* data, size_t count, DataType type, int root) override;
  void allgather(const void* in, void* out, size_t count, DataType type) override;
  void reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) override;
  void barrier() override;
  std::unique_ptr<ProcessGroup> new_group(std::vector<int> ranks) override;

 private:
  // Waits until comm_ leaves ncclInProgress; throws (after aborting) on error or deadline.
  void wait_ready(const char* what, Clock::time_point start, Clock::time_point deadline);
  // Runs `enqueue` (returns an ncclResult_t) as collective `what` and waits for its completion.
  template <typename Fn>
  void run(const char* what, Fn&& enqueue);
  [[noreturn]] void fail(const char* what, const std::string& why, Clock::time_point start);
  cudaStream_t stream() const { return static_cast<cudaStream_t>(options_.cuda_stream); }

  int rank_;
  int size_;
  int device_;
  ProcessGroupOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* scratch_ = nullptr;  // one int on the device, for barrier()
  std::string failure_;
  int splits_ = 0;
};

NcclProcessGroup::~NcclProcessGroup() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    if (failure_.empty()) {
      // Graceful: flush, then destroy; both polled against a short deadline, abort otherwise.
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      ncclResult_t state = ncclCommFinalize(comm_);
      while (state == ncclInProgress && Clock::now() < deadline) {
        ncclCommGetAsyncError(comm_, &state);
        sched_yield();
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (scratch_ != nullptr) cudaFree(scratch_);
}

void NcclProcessGroup::fail(const char* what, const std::string& why, Clock::time_point start) {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  failure_ = std::string("cohort: NCCL ") + what + " failed on rank " + std::to_string(rank_) +
             " (group of " + std::to_string(size_) + ", device " + std::to_string(device_) +
             ") after " + seconds(Clock::now() - start) + " (timeout " + seconds(options_.timeout) +
             "): " + why + "; communicator aborted";
  throw CollectiveError(failure_, -1);
}

void NcclProcessGroup::wait_ready(const char* what, Clock::time_point start,
                                  Clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) fail(what, ncclGetErrorString(rc), start);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      fail(what, std::string(ncclGetErrorString(state)) + " (" + ncclGetLastError(comm_) + ")",
           start);
    }
    if (Clock::now() >= deadline) fail(what, "timed out (a peer died or stopped?)", start);
    sched_yield();
  }
}

void NcclProcessGroup::init(const ncclUniqueId& id) {
  const auto start = Clock::now();
  COHORT_CUDA_CHECK(cudaSetDevice(device_));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclUniqueId copy = id;
  const ncclResult_t rc = ncclCommInitRankConfig(&comm_, size_, copy, rank_, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    fail("init", ncclGetErrorString(rc), start);
  }
  wait_ready("init", start, start + options_.timeout);
  COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  COHORT_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(int32_t)));
}

void NcclProcessGroup::adopt(ncclComm_t comm) {
  comm_ = comm;
  COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  COHORT_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(int32_t)));
}

template <typename Fn>
void NcclProcessGroup::run(const char* what, Fn&& enqueue) {
  if (!failure_.empty()) {
    throw CollectiveError(
        std::string("cohort: NCCL ") + what + ": the process group failed earlier: " + failure_,
        -1);
  }
  heartbeat();
  const auto start = Clock::now();
  const auto deadline = start + options_.timeout;
  COHORT_CUDA_CHECK(cudaSetDevice(device_));
  const ncclResult_t rc = enqueue();
  if (rc != ncclSuccess && rc != ncclInProgress) fail(what, ncclGetErrorString(rc), start);
  if (rc == ncclInProgress) wait_ready(what, start, deadline);
  COHORT_CUDA_CHECK(cudaEventRecord(done_, stream()));
  for (;;) {
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) fail(what, cudaGetErrorString(q), start);
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      fail(what, std::string(ncclGetErrorString(state)) + " (" + ncclGetLastError(comm_) + ")",
           start);
    }
    if (Clock::now() >= deadline) fail(what, "timed out (a peer died or stopped?)", start);
    sched_yield();
  }
  heartbeat();
}

void NcclProcessGroup::allreduce(void* data, size_t count, DataType type, ReduceOp op) {
  run("allreduce", [&] {
    return ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), comm_, stream());
  });
}

void NcclProcessGroup::broadcast(void* data, size_t count, DataType type, int root) {
  if (root < 0 || root >= size_) {
    throw Error("cohort: broadcast root " + std::to_string(root) + " is not in a group of " +
                std::to_string(size_));
  }
  run("broadcast",
      [&] { return ncclBroadcast(data, data, count, nccl_type(type), root, comm_, stream()); });
}

void NcclProcessGroup::allgather(const void* in, void* out, size_t count, DataType type) {
  run("allgather", [&] { return ncclAllGather(in, out, count, nccl_type(type), comm_, stream()); });
}

void NcclProcessGroup::reduce_scatter(const void* in, void* out, size_t count, DataType type,
                                      ReduceOp op) {
  run("reduce_scatter", [&] {
    return ncclReduceScatter(in, out, count, nccl_type(type), nccl_op(op), comm_, stream());
  });
}

void NcclProcessGroup::barrier() {
  run("barrier",
      [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream()); });
}

std::unique_ptr<ProcessGroup> NcclProcessGroup::new_group(std::vector<int> ranks) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size_ || (i > 0 && ranks[i] <= ranks[i - 1])) {
      throw Error("cohort: new_group: ranks must be sorted, unique and below " +
                  std::to_string(size_));
    }
  }
  ++splits_;
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = it != ranks.end();
  const auto start = Clock::now();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t sub = nullptr;
  COHORT_CUDA_CHECK(cudaSetDevice(device_));
  const ncclResult_t rc =
      ncclCommSplit(comm_, member ? 0 : NCCL_SPLIT_NOCOLOR, rank_, &sub, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) fail("new_group", ncclGetErrorString(rc), start);
  wait_ready("new_group", start, start + options_.timeout);
  if (!member) return nullptr;
  auto g = std::make_unique<NcclProcessGroup>(static_cast<int>(it - ranks.begin()),
                                              static_cast<int>(ranks.size()), device_, options_);
  g->adopt(sub);
  // The split child inherits the parent's non-blocking config: wait until it is usable.
  g->wait_ready("new_group", start, start + options_.timeout);
  return g;
}

}  // namespace

std::unique_ptr<ProcessGroup> new_nccl_process_group(Store& store, int rank, int size, int device,
                                                     const ProcessGroupOptions& options,
                                                     const std::string& uid_key) {
  COHORT_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) {
      throw CollectiveError(
          std::string("cohort: ncclGetUniqueId failed: ") + ncclGetErrorString(rc), -1);
    }
    store.set(uid_key, std::string_view(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    store.wait(std::vector<std::string>{uid_key}, options.timeout);
    const std::string v = store.get(uid_key);
    if (v.size() != sizeof(id)) {
      throw CollectiveError("cohort: NCCL unique id under " + uid_key + " has " +
                                std::to_string(v.size()) + " bytes, expected " +
                                std::to_string(sizeof(id)),
                            -1);
    }
    std::memcpy(&id, v.data(), sizeof(id));
  }
  auto g = std::make_unique<NcclProcessGroup>(rank, size, device, options);
  g->init(id);
  return g;
}

std::unique_ptr<ProcessGroup> new_nccl_process_group(Context& context, int device,
                                                     const ProcessGroupOptions& options) {
  const WorkerIdentity& id = context.identity();
  int devices = 0;
  COHORT_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (device < 0 || device >= devices) {
    throw CudaError("cohort: new_nccl_process_group: CUDA device " + std::to_string(device) +
                    " is not visible (" + std::to_string(devices) + " visible)");
  }
  ProcessGroupOptions o = options;
  if (id.timeout_from_env) o.timeout = id.timeout;
  const std::string key = "nccl_uid/" + id.run_id + "/" + std::to_string(id.restart_count) + "/" +
                          std::to_string(context.next_group_id());
  return new_nccl_process_group(context.store(), id.rank, id.world_size, device, o, key);
}

std::unique_ptr<ProcessGroup> new_nccl_process_group(Context& context,
                                                     const ProcessGroupOptions& options) {
  // One device per local rank; a launcher that already narrowed CUDA_VISIBLE_DEVICES to fewer
  // devices than local ranks (Slurm's GPU binding) leaves each rank its share.
  int devices = 0;
  COHORT_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 1) throw CudaError("cohort: new_nccl_process_group: no CUDA device is visible");
  const int local_rank = context.identity().local_rank;
  return new_nccl_process_group(context, local_rank % devices, options);
}

}  // namespace cohort
