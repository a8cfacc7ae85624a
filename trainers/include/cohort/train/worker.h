// cohort::train::Worker: what a trainer binary needs from its launcher, set up in one call.
//
// From the environment (cohortrun, torchrun, Slurm or Open MPI; see cohort/context.h): the rank,
// the world, the compute device (--device cuda: GPU <local rank modulo the visible GPUs>; cuda:N:
// GPU N), a process group, OpenBLAS threads from OMP_NUM_THREADS, and a per-step hook that sends
// heartbeats. Without a launcher (no WORLD_SIZE) the worker is a single process.
//
// The group is NCCL when every rank has a GPU of its own, else the CPU group; all ranks agree
// through the store (gradient_path.h). The NCCL group runs on the model's device and stream.
//
// Thread safety: none; owned by main.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cohort/train/comm.h"
#include "cohort/train/device.h"

namespace cohort {
class Context;
}

namespace cohort::train {

struct WorkerOptions {
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N"
  int threads = 0;             // CPU threads (0: OMP_NUM_THREADS, else all CPUs)
};

class Worker {
 public:
  // Connects to the launcher's store and builds the group; throws cohort::Error (no store, bad
  // environment), CudaError (no GPU) or std::invalid_argument (unknown device).
  static std::unique_ptr<Worker> start(const WorkerOptions& options);
  // The same over an existing Context (tests, embedders; defined only in builds with libcohort,
  // COHORT_TRAIN_HAVE_RUNTIME). The process group is built even for a world of one, so a one-rank
  // job takes the data-parallel path (NCCL on a one-GPU machine).
  static std::unique_ptr<Worker> start(const WorkerOptions& options, cohort::Context context);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  Device& device() { return *device_; }
  Comm& comm() { return *comm_; }
  int rank() const { return rank_; }
  int local_rank() const { return local_rank_; }
  int world_size() const { return world_; }
  int restart_count() const { return restart_count_; }
  // Why the gradients take the path they do, one line: "one process", or gradient_path.h's
  // reason ("NCCL: 2 ranks, each on a GPU of its own", "CPU group, ...: ranks 0 and 1 share ...").
  const std::string& gradient_path() const { return gradient_path_; }
  // Call after every step: sends a heartbeat to the local agent when the launcher asked for them.
  std::function<void()> step_hook();

 private:
  Worker() = default;
  struct Runtime;  // Context and process group, when libcohort is linked
  // Destroyed in reverse order: the Comm, then the group (a NCCL communicator is finalised while
  // the device's stream it was given still exists), then the Context, and the device last.
  std::unique_ptr<Device> device_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Comm> comm_;
  int rank_ = 0, local_rank_ = 0, world_ = 1, restart_count_ = 0;
  std::string gradient_path_ = "one process";
};

// Runs a trainer's main(): returns what main_fn returns. An exception that escapes it ends the
// process with status 1 after printing one line to stderr and, with libcohort, writing torchrun's
// error file ($TORCHELASTIC_ERROR_FILE) with the stack where it was thrown (cohort::run_main).
// REQUIRES: called from main(), with nothing catching exceptions around main_fn.
int run_worker_main(int argc, char** argv, int (*main_fn)(int, char**));

}  // namespace cohort::train
