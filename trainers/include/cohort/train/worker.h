// cohort::train::Worker: what a trainer binary needs from its launcher, set up in one call.
//
// From the environment (cohortrun, torchrun, Slurm or Open MPI; see cohort/context.h): the rank,
// the world, a process group (CPU, or NCCL for --device cuda), the compute device (cuda:<local
// rank modulo the GPUs>), OpenBLAS threads from OMP_NUM_THREADS, and a per-step hook that sends
// heartbeats. Without a launcher (no WORLD_SIZE) the worker is a single process.
//
// Thread safety: none; owned by main.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cohort/train/comm.h"
#include "cohort/train/device.h"

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
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  Device& device() { return *device_; }
  Comm& comm() { return *comm_; }
  int rank() const { return rank_; }
  int local_rank() const { return local_rank_; }
  int world_size() const { return world_; }
  int restart_count() const { return restart_count_; }
  // Call after every step: sends a heartbeat to the local agent when the launcher asked for them.
  std::function<void()> step_hook();

 private:
  Worker() = default;
  struct Runtime;  // Context and process group, when libcohort is linked
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Comm> comm_;
  int rank_ = 0, local_rank_ = 0, world_ = 1, restart_count_ = 0;
};

// Runs a trainer's main(): returns what main_fn returns. An exception that escapes it ends the
// process with status 1 after printing one line to stderr and, with libcohort, writing torchrun's
// error file ($TORCHELASTIC_ERROR_FILE) with the stack where it was thrown (cohort::run_main).
// REQUIRES: called from main(), with nothing catching exceptions around main_fn.
int run_worker_main(int argc, char** argv, int (*main_fn)(int, char**));

}  // namespace cohort::train
