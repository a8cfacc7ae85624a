#include "cohort/train/worker.h"

#include "cohort/train/preemption.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "cohort/error.h"

#ifdef COHORT_TRAIN_HAVE_RUNTIME
#include "cohort/context.h"
#include "cohort/cpu_process_group.h"
#include "cohort/error_file.h"
#if __has_include("cohort/heartbeat.h")
#include "cohort/heartbeat.h"
#define COHORT_TRAIN_HEARTBEAT 1
#endif
#if defined(COHORT_TRAIN_HAVE_CUDA) && defined(COHORT_HAVE_NCCL)
#include "cohort/nccl_process_group.h"
#endif
#endif

namespace cohort::train {

#ifdef COHORT_TRAIN_HAVE_RUNTIME
struct Worker::Runtime {
  explicit Runtime(Context c) : ctx(std::move(c)) {}
  Context ctx;
  std::unique_ptr<ProcessGroup> pg;
};
#else
struct Worker::Runtime {};
#endif

Worker::~Worker() = default;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::unique_ptr<Device> make_device(const WorkerOptions& o, int local_rank) {
  if (o.device == "cpu") return make_cpu_device(o.threads);
  if (o.device.rfind("cuda", 0) == 0) {
    int index = local_rank;
    if (o.device.size() > 5 && o.device[4] == ':') index = std::stoi(o.device.substr(5));
    // make_cuda_device wraps the index modulo the visible GPUs.
    return make_cuda_device(index);
  }
  throw std::invalid_argument("unknown --device '" + o.device + "' (cpu, cuda or cuda:N)");
}

}  // namespace

std::unique_ptr<Worker> Worker::start(const WorkerOptions& options) {
  std::unique_ptr<Worker> w(new Worker());
  install_checkpoint_signal();
#ifdef COHORT_TRAIN_HAVE_RUNTIME
  // Any launcher the runtime knows: cohortrun/torchrun (WORLD_SIZE), srun (SLURM_NTASKS), mpirun.
  const int world = WorkerIdentity::parse(current_env()).world_size;
#else
  const int world = env_int("WORLD_SIZE", 1);
#endif
#ifdef COHORT_TRAIN_HAVE_RUNTIME
  if (world > 1) {
    w->runtime_ = std::make_unique<Runtime>(Context::from_env());
    Context& ctx = w->runtime_->ctx;
    w->rank_ = ctx.rank();
    w->local_rank_ = ctx.local_rank();
    w->world_ = ctx.world_size();
    w->restart_count_ = ctx.restart_count();
    w->device_ = make_device(options, w->local_rank_);
    bool on_device = false;
#if defined(COHORT_TRAIN_HAVE_CUDA) && defined(COHORT_HAVE_NCCL)
    // NCCL needs a GPU per local rank; with fewer GPUs than local ranks (tests on a one-GPU box)
    // the gradients go through the CPU group instead.
    if (w->device_->kind() == DeviceKind::kCuda && ctx.local_world_size() <= cuda_device_count()) {
      ProcessGroupOptions pgo;
      pgo.cuda_stream = w->device_->native_stream();
      w->runtime_->pg = new_nccl_process_group(ctx, pgo);
      on_device = true;
    }
#endif
    if (!w->runtime_->pg) w->runtime_->pg = new_cpu_process_group(ctx);
    w->comm_ = std::make_unique<Comm>(*w->runtime_->pg, *w->device_, on_device);
    return w;
  }
#else
  if (world > 1) {
    throw std::runtime_error(
        "WORLD_SIZE=" + std::to_string(world) +
        " but this build has no worker runtime (libcohort); it can only run one process");
  }
#endif
  w->local_rank_ = env_int("LOCAL_RANK", 0);
  w->restart_count_ = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  w->device_ = make_device(options, w->local_rank_);
  w->comm_ = std::make_unique<Comm>();
  return w;
}

std::function<void()> Worker::step_hook() {
#ifdef COHORT_TRAIN_HEARTBEAT
  return [] { cohort::heartbeat(); };
#else
  return {};
#endif
}

int run_worker_main(int argc, char** argv, int (*main_fn)(int, char**)) {
#ifdef COHORT_TRAIN_HAVE_RUNTIME
  return cohort::run_main(argc, argv, main_fn);
#else
  try {
    return main_fn(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
#endif
}

}  // namespace cohort::train
