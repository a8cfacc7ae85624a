#include "cohort/train/worker.h"

#include "cohort/train/preemption.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "cohort/error.h"
#include "cohort/train/gradient_path.h"

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
  std::unique_ptr<ProcessGroup> pg;  // declared after ctx: destroyed first, as it must be
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

// "cpu", "cuda" (GPU local_rank modulo the visible GPUs: one per rank, or ranks wrapping around
// fewer GPUs) or "cuda:N" (GPU N for every rank of the node).
std::unique_ptr<Device> make_device(const WorkerOptions& o, int local_rank) {
  if (o.device == "cpu") return make_cpu_device(o.threads);
  if (o.device == "cuda") {
    const int count = cuda_device_count();
    return make_cuda_device(count > 0 ? local_rank % count : 0);  // throws without a GPU
  }
  if (o.device.rfind("cuda:", 0) == 0) {
    const std::string n = o.device.substr(5);
    if (!n.empty() && n.size() <= 4 && n.find_first_not_of("0123456789") == std::string::npos) {
      return make_cuda_device(std::stoi(n));
    }
  }
  throw UsageError("unknown --device '" + o.device + "' (cpu, cuda or cuda:N)");
}

}  // namespace

std::unique_ptr<Worker> Worker::start(const WorkerOptions& options) {
#ifdef COHORT_TRAIN_HAVE_RUNTIME
  // Any launcher the runtime knows: cohortrun/torchrun (WORLD_SIZE), srun (SLURM_NTASKS), mpirun.
  const int world = WorkerIdentity::parse(current_env()).world_size;
  if (world > 1) return start(options, Context::from_env());
#else
  const int world = env_int("WORLD_SIZE", 1);
  if (world > 1) {
    throw UsageError(
        "WORLD_SIZE=" + std::to_string(world) +
        " but this build has no worker runtime (libcohort); it can only run one process");
  }
#endif
  install_checkpoint_signal();
  std::unique_ptr<Worker> w(new Worker());
  w->local_rank_ = env_int("LOCAL_RANK", 0);
  w->restart_count_ = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  w->device_ = make_device(options, w->local_rank_);
  w->comm_ = std::make_unique<Comm>();
  return w;
}

#ifdef COHORT_TRAIN_HAVE_RUNTIME
std::unique_ptr<Worker> Worker::start(const WorkerOptions& options, Context context) {
  install_checkpoint_signal();
  std::unique_ptr<Worker> w(new Worker());
  w->rank_ = context.rank();
  w->local_rank_ = context.local_rank();
  w->world_ = context.world_size();
  w->restart_count_ = context.restart_count();
  w->device_ = make_device(options, w->local_rank_);
  w->runtime_ = std::make_unique<Runtime>(std::move(context));
  Context& ctx = w->runtime_->ctx;
  bool on_device = false;
#if defined(COHORT_TRAIN_HAVE_CUDA) && defined(COHORT_HAVE_NCCL)
  // Every rank publishes its GPU, whatever its device, so that all decide on the same list.
  const GradientPath path = agree_gradient_path(ctx.store(), "train/gpu/", w->rank_, w->world_,
                                                gpu_identity(*w->device_), ctx.identity().timeout);
  w->gradient_path_ = path.reason;
  if (path.nccl) {
    ProcessGroupOptions pgo;
    pgo.cuda_stream = w->device_->native_stream();
    w->runtime_->pg = new_nccl_process_group(ctx, w->device_->cuda_index(), pgo);
    on_device = true;
  } else if (w->device_->kind() == DeviceKind::kCuda && w->rank_ == 0) {
    spdlog::warn("{}", path.reason);
  }
#else
  w->gradient_path_ = w->device_->kind() == DeviceKind::kCuda
                          ? "CPU group, staged through host memory: this build has no NCCL"
                          : "CPU group";
#endif
  if (!w->runtime_->pg) {
    if (w->device_->kind() == DeviceKind::kCpu) w->gradient_path_ = "CPU group";
    w->runtime_->pg = new_cpu_process_group(ctx);
  }
  w->comm_ = std::make_unique<Comm>(*w->runtime_->pg, *w->device_, on_device);
  return w;
}
#endif

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
