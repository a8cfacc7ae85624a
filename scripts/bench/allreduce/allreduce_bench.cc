// cohort_allreduce_bench: times libcohort's CPU allreduce between N processes on this machine,
// the way nccl-tests does (time per call, algbw = bytes / time, busbw = algbw * 2(n-1)/n), and a
// single-process memcpy of each size as the memory-bandwidth ceiling. Prints one JSON object per
// line (see ../allreduce_bench, which adds PyTorch gloo and the table).
//
//   cohort_allreduce_bench [--world N] [--min BYTES] [--max BYTES] [--tcp] [--slot BYTES]
//                          [--small BYTES]
//
// The parent hosts the store and spawns N copies of itself as ranks ("--rank R --port P").
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cohort/cpu_process_group.h"
#include "cohort/rdzv/prefix_store.h"
#include "cohort/rdzv/server.h"
#include "cohort/rdzv/tcp_store.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int world = 2;
  size_t min_bytes = 4096;
  size_t max_bytes = 64 << 20;
  bool tcp = false;
  size_t slot = 0;
  long long small = -1;
  int rank = -1;
  int port = 0;
  bool pin = false;  // pin rank r to CPU r % ncpu (an experiment: the runtime itself never pins)
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (k == "--world")
      a.world = std::stoi(next());
    else if (k == "--min")
      a.min_bytes = std::stoull(next());
    else if (k == "--max")
      a.max_bytes = std::stoull(next());
    else if (k == "--tcp")
      a.tcp = true;
    else if (k == "--slot")
      a.slot = std::stoull(next());
    else if (k == "--small")
      a.small = std::stoll(next());
    else if (k == "--rank")
      a.rank = std::stoi(next());
    else if (k == "--port")
      a.port = std::stoi(next());
  }
  return a;
}

std::vector<size_t> sizes(const Args& a) {
  std::vector<size_t> out;
  for (size_t s = a.min_bytes; s <= a.max_bytes; s *= 4) out.push_back(s);
  return out;
}

int iterations(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / bytes, 5, 2000));
}

// CPU time this process has used (so a run on a loaded machine shows how much of the wall time
// was spent working rather than waiting for a core).
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double memcpy_seconds(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  // Best of many: the ceiling should be what the memory system can do, not a noisy sample.
  const int iters = std::clamp(iterations(bytes) / 4, 20, 500);
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    asm volatile("" : : "r"(b.data()) : "memory");
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

int run_rank(const Args& a) {
  if (a.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a.rank % static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
  cohort::TcpStoreOptions so;
  so.port = a.port;
  cohort::TcpStore store(so);
  cohort::PrefixStore scoped("bench", store);
  cohort::ProcessGroupOptions o;
  o.use_shared_memory = !a.tcp;
  o.shm_slot_bytes = a.slot;
  o.small_message_bytes = a.small;
  o.segment_tag = "bench";
  auto pg =
      cohort::new_cpu_process_group(scoped, a.rank, a.world, o, cohort::default_host_identity());
  for (size_t bytes : sizes(a)) {
    std::vector<float> buf(bytes / sizeof(float), 1.0f);
    const int iters = iterations(bytes);
    for (int i = 0; i < 3; ++i) pg->allreduce(std::span<float>(buf), cohort::ReduceOp::kSum);
    pg->barrier();
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) pg->allreduce(std::span<float>(buf), cohort::ReduceOp::kSum);
    double t = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    double cpu = (cpu_seconds() - cpu0) / iters;
    pg->allreduce(std::span<double>(&cpu, 1), cohort::ReduceOp::kMax);
    pg->allreduce(std::span<double>(&t, 1), cohort::ReduceOp::kMax);  // the slowest rank's time
    if (a.rank == 0) {
      const double algbw = static_cast<double>(bytes) / t / 1e9;
      const double busbw = algbw * 2.0 * (a.world - 1) / a.world;
      std::printf(
          "{\"impl\": \"cohort\", \"bytes\": %zu, \"iters\": %d, \"time_us\": %.2f, "
          "\"algbw_GBps\": %.3f, \"busbw_GBps\": %.3f, \"cpu_us\": %.2f}\n",
          bytes, iters, t * 1e6, algbw, busbw, cpu * 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}

int run_parent(const Args& a, const char* self) {
  for (size_t bytes : sizes(a)) {
    const double t = memcpy_seconds(bytes);
    std::printf("{\"impl\": \"memcpy\", \"bytes\": %zu, \"time_us\": %.2f, \"GBps\": %.3f}\n",
                bytes, t * 1e6, static_cast<double>(bytes) / t / 1e9);
  }
  std::fflush(stdout);
  cohort::rdzv::StoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  cohort::rdzv::StoreServerThread server(so);
  std::vector<pid_t> pids;
  for (int r = 0; r < a.world; ++r) {
    std::vector<std::string> args = {self,
                                     "--rank",
                                     std::to_string(r),
                                     "--port",
                                     std::to_string(server.port()),
                                     "--world",
                                     std::to_string(a.world),
                                     "--min",
                                     std::to_string(a.min_bytes),
                                     "--max",
                                     std::to_string(a.max_bytes),
                                     "--slot",
                                     std::to_string(a.slot),
                                     "--small",
                                     std::to_string(a.small)};
    if (a.tcp) args.push_back("--tcp");
    if (a.pin) args.push_back("--pin");
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ) != 0) {
      std::perror("posix_spawn");
      return 1;
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.rank >= 0) return run_rank(a);
  return run_parent(a, "/proc/self/exe");
}
