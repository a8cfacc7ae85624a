// A worker program for the multi-process tests: a real process that reads its identity from the
// environment (as under cohortrun or torchrun), joins a CPU process group through the store at
// MASTER_ADDR:MASTER_PORT, and plays one scenario:
//
//   collectives   every collective against the serial reference; exit 0 iff all match
//   kill          allreduces; rank $COHORT_TEST_VICTIM SIGKILLs itself before iteration
//                 $COHORT_TEST_ITER; survivors print "BLAMED <rank> <ms>" and exit 3
//   hang          the same, but the victim stops (pause()) instead of dying
//   throw         throws std::runtime_error (error file through run_main)
//   segv          dereferences a null pointer (error file through the signal handler)
//   wait-go       rank $COHORT_TEST_WAITER waits for the file $COHORT_TEST_GO before creating
//                 its group; then one allreduce (tests of peers that die during setup)
//   token-env     notes the store token it was given (COHORT_STORE_TOKEN_FILE's contents, else
//                 COHORT_STORE_TOKEN), then checks that after Context::from_env() neither its
//                 environment, nor /proc/self/environ, nor a grandchild's /proc/self/environ holds
//                 the token or its variables; prints "TOKEN_FILE <path> MODE <octal>" and
//                 "CLEAN rank <r>", then runs `collectives` (the store still authenticates it)
//   steps         $COHORT_TEST_STEPS steps (default 100) of 20 ms "compute" (rank
//                 $COHORT_TEST_SLOW_RANK: $COHORT_TEST_SLOW_FACTOR times as long, default 3) and a
//                 small allreduce, each told to cohortrun with cohort::report_step (the
//                 straggler tests); prints "STEPS rank <r>"
//   round-keys    looks in the raw store (Context::root_store()) for the key "heal/probe/<a>/<r>"
//                 of every earlier attempt a and rank r: one it sees fails the worker (exit 9,
//                 "STALE ..."); then writes its own, builds a CPU group and allreduces once. In
//                 attempts below $COHORT_TEST_FAIL_UNTIL (default 1) rank 1 then exits 3, so the
//                 group restarts; else prints "ISOLATED rank <r> attempt <a>"
//
// On a restart (TORCHELASTIC_RESTART_COUNT > 0) kill/hang have no victim, so a launcher that
// restarts the group sees the job succeed. Env knobs: COHORT_TEST_SHM=0 (TCP only),
// COHORT_TEST_SLOT (shared-memory slot bytes), COHORT_TEST_ITERS (iterations, default 50).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cohort/cpu_process_group.h"
#include "cohort/error_file.h"
#include "cohort/heartbeat.h"
#include "collective_checks.h"

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

cohort::ProcessGroupOptions options_from_env() {
  cohort::ProcessGroupOptions o;
  o.use_shared_memory = env_int("COHORT_TEST_SHM", 1) != 0;
  o.shm_slot_bytes = static_cast<size_t>(env_int("COHORT_TEST_SLOT", 0));
  return o;
}

int run_collectives(cohort::Context& ctx) {
  auto pg = cohort::new_cpu_process_group(ctx, options_from_env());
  auto failures = cohort::test::check_collectives(*pg);
  // One large allreduce crosses several rounds of the default slot.
  std::vector<float> big(3'000'001);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((i + ctx.rank()) % 7);
  pg->allreduce(std::span<float>(big), cohort::ReduceOp::kSum);
  for (size_t i = 0; i < big.size(); ++i) {
    float want = 0;
    for (int r = 0; r < ctx.world_size(); ++r) want += static_cast<float>((i + r) % 7);
    if (big[i] != want) {
      failures.push_back("big allreduce element " + std::to_string(i) + ": got " +
                         std::to_string(big[i]) + ", want " + std::to_string(want));
      break;
    }
  }
  for (const auto& f : failures) std::fprintf(stderr, "MISMATCH %s\n", f.c_str());
  std::printf("%s rank %d\n", failures.empty() ? "OK" : "FAILED", ctx.rank());
  return failures.empty() ? 0 : 1;
}

int run_victim(cohort::Context& ctx, bool hang) {
  auto pg = cohort::new_cpu_process_group(ctx, options_from_env());
  const int victim = ctx.restart_count() == 0 ? env_int("COHORT_TEST_VICTIM", 1) : -1;
  const int at = env_int("COHORT_TEST_ITER", 5);
  const int iters = env_int("COHORT_TEST_ITERS", 50);
  std::vector<float> v(1 << 20, 1.0f);
  for (int i = 0; i < iters; ++i) {
    if (ctx.rank() == victim && i == at) {
      if (hang) {
        for (;;) ::pause();
      }
      ::kill(::getpid(), SIGKILL);
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      pg->allreduce(std::span<float>(v), cohort::ReduceOp::kAvg);
    } catch (const cohort::CollectiveError& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
      std::printf("BLAMED %d %lld\n", e.missing_rank(), static_cast<long long>(ms));
      std::fprintf(stderr, "%s\n", e.what());
      std::fflush(stdout);
      return 3;
    }
  }
  std::printf("OK rank %d\n", ctx.rank());
  return 0;
}

int run_wait_go(cohort::Context& ctx) {
  const char* go = std::getenv("COHORT_TEST_GO");
  if (go != nullptr && ctx.rank() == env_int("COHORT_TEST_WAITER", -1)) {
    // Publish this rank's host identity as the group's setup would, so that the other ranks get
    // as far as creating and joining the shared-memory segment before this one joins.
    ctx.store().set("cpu_pg/0/host/" + std::to_string(ctx.rank()), cohort::default_host_identity());
    struct stat st {};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (::stat(go, &st) != 0) {
      if (std::chrono::steady_clock::now() > deadline) return 4;
      std::this_thread::yield();
    }
  }
  try {
    auto pg = cohort::new_cpu_process_group(ctx, options_from_env());
    std::vector<float> v(1000, 1.0f);
    pg->allreduce(std::span<float>(v), cohort::ReduceOp::kSum);
  } catch (const cohort::CollectiveError& e) {
    std::printf("BLAMED %d 0\n", e.missing_rank());
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  }
  std::printf("OK rank %d\n", ctx.rank());
  return 0;
}

std::string slurp(std::FILE* f) {
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
  return out;
}

std::string file_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return {};
  std::string out = slurp(f);
  std::fclose(f);
  return out;
}

// The token as a worker is given it, before Context::from_env() takes it away.
struct GivenToken {
  std::string file;  // COHORT_STORE_TOKEN_FILE, "" when unset
  std::string token;
};

GivenToken given_token() {
  GivenToken g;
  if (const char* f = std::getenv("COHORT_STORE_TOKEN_FILE")) {
    g.file = f;
    g.token = file_text(f);
    while (!g.token.empty() && (g.token.back() == '\n' || g.token.back() == '\r'))
      g.token.pop_back();
  } else if (const char* t = std::getenv("COHORT_STORE_TOKEN")) {
    g.token = t;
  }
  return g;
}

int run_token_env(cohort::Context& ctx, const GivenToken& given) {
  std::vector<std::string> leaks;
  if (given.token.empty()) leaks.push_back("no token was given");
  for (const char* var : {"COHORT_STORE_TOKEN", "COHORT_STORE_TOKEN_FILE"})
    if (std::getenv(var) != nullptr) leaks.push_back(std::string(var) + " is still set");
  const std::string own = file_text("/proc/self/environ");
  if (own.empty()) leaks.push_back("cannot read /proc/self/environ");
  if (!given.token.empty() && own.find(given.token) != std::string::npos)
    leaks.push_back("the token is in /proc/self/environ");
  // A grandchild: the shell popen starts, and the cat it starts, read their own environment.
  std::FILE* p = ::popen("cat /proc/self/environ", "r");
  const std::string child = p ? slurp(p) : std::string();
  if (p == nullptr || ::pclose(p) != 0 || child.empty()) leaks.push_back("no grandchild");
  if (child.find("COHORT_STORE_TOKEN") != std::string::npos)
    leaks.push_back("a grandchild inherited a COHORT_STORE_TOKEN variable");
  if (!given.token.empty() && child.find(given.token) != std::string::npos)
    leaks.push_back("a grandchild inherited the token");
  for (const auto& l : leaks) std::fprintf(stderr, "LEAK rank %d: %s\n", ctx.rank(), l.c_str());
  if (!leaks.empty()) return 1;
  struct stat st {};
  if (!given.file.empty() && ::stat(given.file.c_str(), &st) == 0) {
    std::printf("TOKEN_FILE %s MODE %o\n", given.file.c_str(),
                static_cast<unsigned>(st.st_mode & 07777));
  }
  std::printf("CLEAN rank %d\n", ctx.rank());
  std::fflush(stdout);
  return run_collectives(ctx);
}

int run_steps(cohort::Context& ctx) {
  using Clock = std::chrono::steady_clock;
  auto pg = cohort::new_cpu_process_group(ctx, options_from_env());
  const int steps = env_int("COHORT_TEST_STEPS", 100);
  const int slow = env_int("COHORT_TEST_SLOW_RANK", -1);
  const int factor = env_int("COHORT_TEST_SLOW_FACTOR", 3);
  const auto compute = std::chrono::milliseconds(ctx.rank() == slow ? 20 * factor : 20);
  std::vector<float> grad(1024, 1.0f);
  for (int step = 1; step <= steps; ++step) {
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(compute);  // the step's work: the slow rank's is longer
    const auto t1 = Clock::now();
    pg->allreduce(std::span<float>(grad), cohort::ReduceOp::kSum);
    const auto t2 = Clock::now();
    const double step_s = std::chrono::duration<double>(t2 - t0).count();
    cohort::report_step(step, step_s, 32 * ctx.world_size() / step_s,
                        std::chrono::duration<double>(t2 - t1).count());
  }
  std::printf("STEPS rank %d\n", ctx.rank());
  return 0;
}

int run_round_keys(cohort::Context& ctx) {
  const int attempt = ctx.restart_count();
  cohort::Store& raw = ctx.root_store();
  auto probe = [](int a, int r) {
    return "heal/probe/" + std::to_string(a) + "/" + std::to_string(r);
  };
  for (int a = 0; a < attempt; ++a) {
    for (int r = 0; r < ctx.world_size(); ++r) {
      const std::vector<std::string> key{probe(a, r)};
      if (raw.check(key)) {
        std::printf("STALE rank %d attempt %d sees %s\n", ctx.rank(), attempt, key[0].c_str());
        std::fflush(stdout);
        return 9;
      }
    }
  }
  raw.set(probe(attempt, ctx.rank()), std::to_string(::getpid()));
  auto pg = cohort::new_cpu_process_group(ctx, options_from_env());
  std::vector<float> v(16, 1.0f);
  pg->allreduce(std::span<float>(v), cohort::ReduceOp::kSum);
  if (attempt < env_int("COHORT_TEST_FAIL_UNTIL", 1) && ctx.rank() == 1) return 3;
  std::printf("ISOLATED rank %d attempt %d\n", ctx.rank(), attempt);
  return 0;
}

}  // namespace

// Not in the anonymous namespace: the error-file tests look for this frame by name.
int worker_main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s collectives|kill|hang|throw|segv|wait-go|token-env|steps|round-keys\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "throw") throw std::runtime_error("boom from the test worker");
  if (mode == "segv") {
    volatile int* p = nullptr;
    *p = 1;
  }
  const GivenToken given = given_token();
  cohort::Context ctx = cohort::Context::from_env();
  if (mode == "token-env") return run_token_env(ctx, given);
  if (mode == "collectives") return run_collectives(ctx);
  if (mode == "kill") return run_victim(ctx, false);
  if (mode == "hang") return run_victim(ctx, true);
  if (mode == "wait-go") return run_wait_go(ctx);
  if (mode == "steps") return run_steps(ctx);
  if (mode == "round-keys") return run_round_keys(ctx);
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}

int main(int argc, char** argv) {
  return cohort::run_main(argc, argv, worker_main);
}
