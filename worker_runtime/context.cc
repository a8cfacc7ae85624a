#include "cohort/context.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>

#include "cohort/base/parse.h"

#include "cohort/base/slurm.h"
#include "cohort/base/worker_env_names.h"
#include "cohort/rdzv/auth.h"
#include "cohort/rdzv/memory_store.h"
#include "cohort/rdzv/prefix_store.h"
#include "cohort/rdzv/server.h"
#include "cohort/rdzv/tcp_store.h"

namespace cohort {
namespace {

constexpr const char* kManualHint =
    "cohortrun and torchrun set it; for a manual launch set RANK, LOCAL_RANK, WORLD_SIZE, "
    "MASTER_ADDR and MASTER_PORT";

const std::string* find(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

[[noreturn]] void missing(const char* name, const std::string& hint) {
  throw UsageError(std::string("cohort: environment variable ") + name + " is not set (" + hint +
                   ")");
}

int parse_int(const char* name, const std::string& value, int min_value) {
  auto v = cohort::parse_int(value, min_value, std::numeric_limits<int>::max());
  if (!v) {
    throw UsageError(std::string("cohort: environment variable ") + name + "='" + value +
                     "' is not an integer >= " + std::to_string(min_value));
  }
  return *v;
}

int required_int(const EnvMap& env, const char* name, int min_value, const std::string& hint) {
  const std::string* v = find(env, name);
  if (v == nullptr) missing(name, hint);
  return parse_int(name, *v, min_value);
}

int optional_int(const EnvMap& env, const char* name, int min_value, int fallback) {
  const std::string* v = find(env, name);
  return v == nullptr ? fallback : parse_int(name, *v, min_value);
}

// SLURM_TASKS_PER_NODE-style lists: "2(x3),1" -> the count for node `node`.
int slurm_tasks_on_node(const char* name, const std::string& list, int node) {
  std::vector<int> counts;
  try {
    counts = slurm::expand_counts(list);
  } catch (const std::exception& e) {
    throw UsageError(std::string("cohort: environment variable ") + name + "='" + list +
                     "' is not a Slurm task list such as 2(x3),1 (" + e.what() + ")");
  }
  if (node < 0 || static_cast<size_t>(node) >= counts.size()) {
    throw UsageError(std::string("cohort: environment variable ") + name + "='" + list +
                     "' has no entry for node " + std::to_string(node));
  }
  return counts[static_cast<size_t>(node)];
}

void parse_master(const EnvMap& env, WorkerIdentity& id, const std::string& hint) {
  const std::string* addr = find(env, worker_env::kMasterAddr);
  if (addr == nullptr || addr->empty()) missing(worker_env::kMasterAddr, hint);
  id.master_addr = *addr;
  id.master_port = required_int(env, worker_env::kMasterPort, 1, hint);
  if (id.master_port > 65535) {
    throw UsageError("cohort: environment variable MASTER_PORT='" +
                     env.at(worker_env::kMasterPort) + "' is not a port number (1..65535)");
  }
}

void check_ranges(const WorkerIdentity& id, const char* rank_var, const char* world_var,
                  const char* local_var, const char* local_world_var) {
  if (id.world_size < 1) {
    throw UsageError(std::string("cohort: environment variable ") + world_var + " must be >= 1");
  }
  if (id.rank >= id.world_size) {
    throw UsageError(std::string("cohort: ") + rank_var + "=" + std::to_string(id.rank) +
                     " is not below " + world_var + "=" + std::to_string(id.world_size));
  }
  if (id.local_world_size < 1 || id.local_world_size > id.world_size) {
    throw UsageError(std::string("cohort: ") + local_world_var + "=" +
                     std::to_string(id.local_world_size) + " must be in 1.." + world_var + "=" +
                     std::to_string(id.world_size));
  }
  if (id.local_rank >= id.local_world_size) {
    throw UsageError(std::string("cohort: ") + local_var + "=" + std::to_string(id.local_rank) +
                     " is not below " + local_world_var + "=" +
                     std::to_string(id.local_world_size));
  }
}

StoreDialect dialect_of(const std::string& s) {
  return s == "torch113" ? StoreDialect::kTorch113 : StoreDialect::kCurrent;
}

}  // namespace

WorkerIdentity WorkerIdentity::parse(const EnvMap& env) {
  WorkerIdentity id;
  if (find(env, worker_env::kRank) != nullptr || find(env, worker_env::kWorldSize) != nullptr) {
    // cohortrun, torchrun, or a manual env:// launch.
    const std::string hint = kManualHint;
    id.rank = required_int(env, worker_env::kRank, 0, hint);
    id.world_size = required_int(env, worker_env::kWorldSize, 1, hint);
    id.local_rank = required_int(env, worker_env::kLocalRank, 0, hint);
    const int group_world = optional_int(env, worker_env::kGroupWorldSize, 1, 1);
    id.local_world_size =
        optional_int(env, worker_env::kLocalWorldSize, 1, std::max(1, id.world_size / group_world));
    id.group_rank = optional_int(env, worker_env::kGroupRank, 0, 0);
    id.restart_count = optional_int(env, worker_env::kRestartCount, 0, 0);
    if (const std::string* v = find(env, worker_env::kRunId)) id.run_id = *v;
    parse_master(env, id, hint);
    const bool agent = find(env, worker_env::kRunId) != nullptr;
    // cohortrun marks its workers with COHORT_AGENT_ID (and COHORT_HEARTBEAT_FD when it watches
    // heartbeats).
    const bool cohortrun = find(env, worker_env::kAgentId) != nullptr ||
                           find(env, worker_env::kHeartbeatFd) != nullptr;
    id.source = cohortrun ? "cohortrun" : agent ? "torchrun" : "env";
    // torchrun's agent hosts the store when TORCHELASTIC_USE_AGENT_STORE=True; PyTorch's env://
    // otherwise makes rank 0 host it.
    const std::string* use_agent = find(env, worker_env::kUseAgentStore);
    id.rank0_hosts_store = !cohortrun && (use_agent == nullptr || *use_agent != "True");
    check_ranges(id, worker_env::kRank, worker_env::kWorldSize, worker_env::kLocalRank,
                 worker_env::kLocalWorldSize);
  } else if (find(env, "SLURM_PROCID") != nullptr) {
    const std::string hint = "srun sets it";
    id.rank = required_int(env, "SLURM_PROCID", 0, hint);
    id.local_rank = required_int(env, "SLURM_LOCALID", 0, hint);
    id.world_size = find(env, "SLURM_NTASKS") != nullptr
                        ? required_int(env, "SLURM_NTASKS", 1, hint)
                        : required_int(env, "SLURM_NPROCS", 1, hint);
    id.group_rank = optional_int(env, "SLURM_NODEID", 0, 0);
    const char* tasks_var = find(env, "SLURM_STEP_TASKS_PER_NODE") != nullptr
                                ? "SLURM_STEP_TASKS_PER_NODE"
                                : "SLURM_TASKS_PER_NODE";
    const std::string* tasks = find(env, tasks_var);
    id.local_world_size =
        tasks != nullptr ? slurm_tasks_on_node(tasks_var, *tasks, id.group_rank) : id.world_size;
    id.run_id = "slurm";
    if (const std::string* v = find(env, "SLURM_JOB_ID")) id.run_id += "-" + *v;
    if (const std::string* v = find(env, "SLURM_STEP_ID")) id.run_id += "." + *v;
    if (find(env, worker_env::kMasterAddr) != nullptr) {
      parse_master(env, id, hint);
    } else {
      // A direct srun launch: the store is hosted by task 0, on the job's first host, at a port
      // derived from the job and step ids (cohort/base/slurm.h), so no address needs passing.
      try {
        auto job = slurm::SlurmEnv::from_env(env);
        if (!job) missing("SLURM_JOB_ID", hint);
        id.master_addr = job->master_address();
        id.master_port = job->derived_port() + static_cast<int>(job->step_id.value_or(0) % 16) * 40;
      } catch (const UsageError& e) {
        const std::string what = e.what();
        if (what.rfind("cohort: ", 0) == 0) throw;  // ours, complete
        throw UsageError("cohort: " + what + " (or set MASTER_ADDR and MASTER_PORT)");
      }
    }
    id.source = "slurm";
    id.rank0_hosts_store = true;
    check_ranges(id, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", tasks_var);
  } else if (find(env, "OMPI_COMM_WORLD_RANK") != nullptr) {
    const std::string hint =
        "mpirun sets it; for an mpirun launch also set MASTER_ADDR and "
        "MASTER_PORT (e.g. mpirun -x MASTER_ADDR=... -x MASTER_PORT=...)";
    id.rank = required_int(env, "OMPI_COMM_WORLD_RANK", 0, hint);
    id.world_size = required_int(env, "OMPI_COMM_WORLD_SIZE", 1, hint);
    id.local_rank = required_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, hint);
    id.local_world_size = required_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, hint);
    id.group_rank = id.rank / id.local_world_size;  // Open MPI exports no node index
    id.run_id = "openmpi";
    if (const std::string* v = find(env, "OMPI_MCA_ess_base_jobid")) id.run_id += "-" + *v;
    parse_master(env, id, hint);
    id.source = "openmpi";
    id.rank0_hosts_store = true;
    check_ranges(id, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE");
  } else {
    id.source = "single";
  }

  if (const std::string* v = find(env, worker_env::kTimeoutSeconds)) {
    double seconds = 0;
    auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), seconds);
    if (v->empty() || ec != std::errc() || ptr != v->data() + v->size() || !(seconds > 0) ||
        !std::isfinite(seconds)) {
      throw UsageError("cohort: environment variable COHORT_TIMEOUT_S='" + *v +
                       "' is not a positive number of seconds");
    }
    id.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
    id.timeout_from_env = true;
  }
  if (const std::string* v = find(env, worker_env::kStoreDialect)) {
    if (*v == "torch113" || *v == "1.13") {
      id.store_dialect = "torch113";
    } else if (*v == "current" || v->empty()) {
      id.store_dialect = "current";
    } else {
      throw UsageError("cohort: environment variable COHORT_STORE_DIALECT='" + *v +
                       "' is neither 'current' nor 'torch113'");
    }
  }
  if (const std::string* v = find(env, worker_env::kSocketAddr)) id.socket_addr = *v;
  return id;
}

Context::Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;
Context::~Context() = default;

namespace {

std::mutex g_token_mu;
// The token this process took out of its environment (from_env()), for later Contexts.
std::optional<std::string> g_consumed_token;

// [start, end) of the environment block the kernel gave this process, which /proc/self/environ
// shows (fields 50 and 51 of /proc/self/stat); {0, 0} when unknown.
std::pair<uintptr_t, uintptr_t> initial_environment_block() {
  std::ifstream f("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t at = stat.rfind(')');  // the command name may hold spaces; the fields follow it
  if (at == std::string::npos) return {0, 0};
  std::istringstream fields(stat.substr(at + 2));  // from field 3 on
  std::string field;
  uintptr_t start = 0, end = 0;
  for (int n = 3; n <= 51 && fields >> field; ++n) {
    if (n == 50) start = std::strtoull(field.c_str(), nullptr, 10);
    if (n == 51) end = std::strtoull(field.c_str(), nullptr, 10);
  }
  return {start, end};
}

// Unsets `name`; when its value lies in the initial environment block, overwrites it there first,
// so that /proc/self/environ no longer shows it either. (Anywhere else, the value came from
// setenv or putenv, which /proc/self/environ never shows, and may be read-only.)
void scrub_env(const char* name) {
  if (char* value = std::getenv(name); value != nullptr) {
    const size_t n = std::strlen(value);
    auto [start, end] = initial_environment_block();
    const auto at = reinterpret_cast<uintptr_t>(value);
    if (start != 0 && at >= start && at + n <= end) std::memset(value, 0, n);
  }
  ::unsetenv(name);
}

}  // namespace

std::string store_token_from(const EnvMap& env) {
  if (const std::string* file = find(env, worker_env::kStoreTokenFile); file && !file->empty()) {
    try {
      return auth::read_token_file(*file);
    } catch (const std::exception& e) {
      throw UsageError(std::string("cohort: environment variable COHORT_STORE_TOKEN_FILE='") +
                       *file + "': " + e.what());
    }
  }
  const std::string* token = find(env, worker_env::kStoreToken);
  return token ? *token : std::string();
}

Context Context::from_env() {
  EnvMap env = current_env();
  {
    // The token is taken out of the environment, so that what this worker starts (data loader
    // processes, shells, other programs) does not inherit it; a later Context of this process
    // still has it.
    std::lock_guard lock(g_token_mu);
    if (env.contains(worker_env::kStoreTokenFile) || env.contains(worker_env::kStoreToken)) {
      g_consumed_token = store_token_from(env);
      scrub_env(worker_env::kStoreToken);
      ::unsetenv(worker_env::kStoreTokenFile);
    }
    env.erase(worker_env::kStoreTokenFile);
    if (g_consumed_token) env[worker_env::kStoreToken] = *g_consumed_token;
  }
  return from_env(env);
}

Context Context::from_env(const EnvMap& env) {
  WorkerIdentity id = WorkerIdentity::parse(env);
  if (id.source == "single") {
    auto store = std::make_shared<MemoryStore>(id.timeout);
    return from_store(std::move(id), std::move(store));
  }
  // cohortrun --auth-token-file hands the store's token to its workers (in a file).
  const std::string token = store_token_from(env);
  std::shared_ptr<void> server;
  if (id.rank0_hosts_store && id.rank == 0) {
    rdzv::StoreServerOptions so;
    so.host = "0.0.0.0";
    so.port = static_cast<uint16_t>(id.master_port);
    so.auth_token = token;
    server = std::make_shared<rdzv::StoreServerThread>(so);
  }
  TcpStoreOptions options;
  options.auth_token = token;
  options.host = id.master_addr;
  options.port = id.master_port;
  options.dialect = dialect_of(id.store_dialect);
  // cohortrun's store is cohortd's: writes can be tagged and retried safely (in the current
  // dialect only; COHORT_STORE_DIALECT=torch113 turns tagging off).
  options.tagged_writes = id.source == "cohortrun" && options.dialect == StoreDialect::kCurrent;
  options.timeout = id.timeout_from_env ? id.timeout : std::chrono::minutes(5);
  options.connect_timeout = options.timeout;
  auto store = std::make_shared<TcpStore>(options);
  Context ctx = from_store(std::move(id), std::move(store));
  ctx.server_ = std::move(server);
  return ctx;
}

Context Context::from_store(WorkerIdentity identity, std::shared_ptr<Store> root) {
  Context ctx;
  ctx.id_ = std::move(identity);
  ctx.root_ = std::move(root);
  ctx.scoped_ = std::make_unique<PrefixStore>(
      "cohort/" + ctx.id_.run_id + "/" + std::to_string(ctx.id_.restart_count), *ctx.root_);
  return ctx;
}

Store& Context::store() {
  return *scoped_;
}
Store& Context::root_store() {
  return *root_;
}

}  // namespace cohort
