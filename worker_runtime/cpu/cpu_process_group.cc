// CpuProcessGroup: picks the transports from the topology, runs the algorithms, and turns their
// PeerFailures into CollectiveErrors that blame the right rank.
//
// Blame: an algorithm reports the peer it was waiting for. That peer may itself have given up
// because of another one, so before blaming it a rank looks at what the others published (the
// segment's abort record, then the store's "abort" key), and it publishes its own verdict in both
// places *before* shutting its connections down: whoever sees those connections close finds the
// original culprit already recorded.
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "cohort/base/logging.h"
#include "cohort/base/net.h"
#include "cohort/base/random.h"
#include "cohort/cpu_process_group.h"
#include "cohort/heartbeat.h"
#include "cohort/rdzv/prefix_store.h"
#include "collective_progress.h"
#include "cpu/algorithms.h"
#include "cpu/topology.h"

namespace cohort {
namespace {

using detail::Call;
using detail::Clock;
using detail::Op;
using detail::PeerFailure;
using detail::ShmWorld;
using detail::TcpMesh;
using detail::Topology;

constexpr size_t kDefaultSlotBytes = 1 << 20;
constexpr size_t kShmSmallBytes = 16 * 1024;
constexpr size_t kTcpDirectBytes = 64 * 1024;

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", std::chrono::duration<double>(d).count());
  return buf;
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_') ? c : '_';
    if (out.size() >= 48) break;
  }
  return out.empty() ? "x" : out;
}

Call make_call(const char* op, DataType type, size_t count, std::chrono::milliseconds timeout) {
  Call c;
  c.op = op;
  c.dtype = type;
  c.count = count;
  c.start = Clock::now();
  c.deadline = c.start + timeout;
  c.timeout = timeout;
  return c;
}

class CpuProcessGroup final : public ProcessGroup {
 public:
  // Rendezvous under `prefix` of `base` (see new_cpu_process_group). host_ids empty: exchanged
  // through the store. global_ranks maps this group's ranks to the root group's.
  // `name` is how cohortrun's hang probes call it ("cohort/0"; collective_progress.h).
  static std::unique_ptr<CpuProcessGroup> create(Store& base, const std::string& prefix, int rank,
                                                 int size, const ProcessGroupOptions& options,
                                                 const std::string& my_host,
                                                 std::vector<std::string> host_ids,
                                                 std::vector<int> global_ranks,
                                                 const std::string& name);

  int rank() const override { return topo_.rank; }
  int size() const override { return topo_.size; }

  void allreduce(void* data, size_t count, DataType type, ReduceOp op) override;
  void broadcast(void* data, size_t count, DataType type, int root) override;
  void allgather(const void* in, void* out, size_t count, DataType type) override;
  void reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) override;
  void barrier() override;
  std::unique_ptr<ProcessGroup> new_group(std::vector<int> ranks) override;

 private:
  CpuProcessGroup(Store& base, const std::string& prefix, const ProcessGroupOptions& options)
      : store_(prefix, base), options_(options) {}

  void setup(const std::string& my_host, std::vector<std::string> host_ids, Call& call);
  // Runs fn as collective `call`: checks the group is usable, beats, converts failures.
  template <typename Fn>
  void run(const Call& call, Fn&& fn);
  [[noreturn]] void fail(const Call& call, const PeerFailure& f);
  // The allreduce of every mode except kSingle; `op` may be kBitOr (internal).
  void allreduce_impl(void* data, size_t count, DataType type, Op op, int divisor,
                      const Call& call);
  void column_allreduce(void* data, size_t count, DataType type, Op op, const Call& call);
  size_t small_bytes(size_t fallback) const {
    return options_.small_message_bytes < 0 ? fallback
                                            : static_cast<size_t>(options_.small_message_bytes);
  }
  std::string describe(const Call& call) const;

  PrefixStore store_;
  ProcessGroupOptions options_;
  Topology topo_;
  std::vector<std::string> host_ids_;
  std::vector<int> global_ranks_;
  std::string my_host_;
  uint64_t token_ = 0;
  std::unique_ptr<ShmWorld> shm_;
  std::unique_ptr<TcpMesh> mesh_;  // all ranks (kTcp) or this rank's column (kHierarchical)
  std::vector<char> scratch_;
  std::vector<char> scratch2_;
  std::string failure_;  // set by the first failure; the group is unusable after it
  int subgroups_ = 0;
  std::string name_;
  std::unique_ptr<detail::GroupProgress> progress_;  // for cohortrun's hang probes
};

std::unique_ptr<CpuProcessGroup> CpuProcessGroup::create(
    Store& base, const std::string& prefix, int rank, int size, const ProcessGroupOptions& options,
    const std::string& my_host, std::vector<std::string> host_ids, std::vector<int> global_ranks,
    const std::string& name) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error("cohort: new_cpu_process_group: rank " + std::to_string(rank) +
                " is not in a group of " + std::to_string(size));
  }
  std::unique_ptr<CpuProcessGroup> g(new CpuProcessGroup(base, prefix, options));
  g->options_.shm_slot_bytes = options.shm_slot_bytes == 0
                                   ? kDefaultSlotBytes
                                   : (options.shm_slot_bytes + 4095) / 4096 * 4096;
  if (g->options_.listen_host.empty()) g->options_.listen_host = "127.0.0.1";
  if (g->options_.segment_tag.empty()) g->options_.segment_tag = "pg";
  g->topo_.rank = rank;
  g->topo_.size = size;
  g->global_ranks_ = std::move(global_ranks);
  if (g->global_ranks_.empty()) {
    for (int r = 0; r < size; ++r) g->global_ranks_.push_back(r);
  }
  Call call = make_call("process group setup", DataType::kFloat32, 0, options.timeout);
  try {
    g->setup(my_host, std::move(host_ids), call);
    component_logger("runtime", "warning")
        ->debug(
            "cpu process group: rank {} of {}, {} mode, {} host(s), {} local rank(s), set up in {}",
            rank, size, detail::mode_name(g->topo_.mode), g->topo_.hosts.size(),
            g->topo_.local_size(), seconds(Clock::now() - call.start));
  } catch (const PeerFailure& f) {
    g->fail(call, f);
  } catch (const StoreTimeoutError& e) {
    g->failure_ = g->describe(call) + ": " + e.what();
    throw CollectiveError(g->failure_, -1);
  }
  g->name_ = name;
  g->progress_ = std::make_unique<detail::GroupProgress>(name, "cohort-cpu", g->global_ranks_);
  return g;
}

void CpuProcessGroup::setup(const std::string& my_host, std::vector<std::string> host_ids,
                            Call& call) {
  const int rank = topo_.rank;
  const int size = topo_.size;
  auto left = [&] {
    return std::max(
        std::chrono::milliseconds(1),
        std::chrono::duration_cast<std::chrono::milliseconds>(call.deadline - Clock::now()));
  };
  // Waits for `keys`; on timeout names the rank behind the first missing one (owner(i) for
  // keys[i]).
  auto await = [&](const std::vector<std::string>& keys, const auto& owner) {
    try {
      store_.wait(keys, left());
    } catch (const StoreTimeoutError&) {
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!store_.check(std::vector<std::string>{keys[i]})) {
          const int r = global_ranks_[owner(i)];
          throw PeerFailure(r, true,
                            "rank " + std::to_string(r) + " did not join the group in time (" +
                                keys[i] + " never appeared in " + store_.describe() + ")");
        }
      }
      throw;
    }
  };
  my_host_ = my_host;
  if (host_ids.empty() && size > 1) {
    store_.set("host/" + std::to_string(rank), my_host);
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("host/" + std::to_string(r));
    await(keys, [](size_t i) { return static_cast<int>(i); });
    host_ids = store_.multi_get(keys);
  }
  if (host_ids.empty()) host_ids.push_back(my_host);
  host_ids_ = host_ids;
  if (size > 1) {
    if (rank == 0) {
      token_ = random_u64();
      store_.set("token", hex(token_));
    } else {
      await(std::vector<std::string>{"token"}, [](size_t) { return 0; });
      token_ = std::stoull(store_.get("token"), nullptr, 16);
    }
  }
  topo_ = Topology::build(rank, host_ids_, options_.use_shared_memory);

  if (topo_.local_size() > 1) {
    ShmWorld::Params p;
    p.name = "/cohort-" + sanitize(options_.segment_tag) + "-" + hex(token_) + "-h" +
             std::to_string(topo_.host);
    p.local_rank = topo_.local;
    for (int r : topo_.hosts[topo_.host]) p.global_ranks.push_back(global_ranks_[r]);
    p.slot_bytes = options_.shm_slot_bytes;
    p.token = token_;
    p.spin = topo_.local_size() <= static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
    const std::string ready = "shm/" + std::to_string(topo_.host);
    try {
      if (topo_.local == 0) {
        detail::sweep_stale_segments();
        shm_ = ShmWorld::create(p);
        store_.set(ready, p.name);
      } else {
        await(std::vector<std::string>{ready}, [&](size_t) { return topo_.hosts[topo_.host][0]; });
        shm_ = ShmWorld::open(p);
      }
      shm_->join(call);
    } catch (...) {
      detail::ShmSegment::remove(p.name);
      throw;
    }
  }

  std::vector<int> members;
  int index = 0;
  std::string key;
  if (topo_.mode == Topology::Mode::kTcp) {
    for (int r = 0; r < size; ++r) members.push_back(global_ranks_[r]);
    index = rank;
    key = "tcp/all";
  } else if (topo_.mode == Topology::Mode::kHierarchical && topo_.local < topo_.columns) {
    for (int r : topo_.column(topo_.local)) members.push_back(global_ranks_[r]);
    index = topo_.host;
    key = "tcp/col" + std::to_string(topo_.local);
  }
  if (!members.empty()) {
    mesh_ = TcpMesh::connect(store_, key, members, index, options_.listen_host, token_, call);
  }
}

std::string CpuProcessGroup::describe(const Call& call) const {
  std::string s = std::string("cohort: ") + call.op;
  if (call.count > 0) {
    s += " (" + std::string(dtype_name(call.dtype)) + " x " + std::to_string(call.count) + ")";
  }
  s += " failed on rank " + std::to_string(global_ranks_[topo_.rank]) + " (group of " +
       std::to_string(topo_.size) + ", " + detail::mode_name(topo_.mode) + ") after " +
       seconds(Clock::now() - call.start) + " (timeout " + seconds(call.timeout) + ")";
  return s;
}

void CpuProcessGroup::fail(const Call& call, const PeerFailure& f) {
  int blamed = f.rank();
  std::string why = f.what();
  // A peer that closed its connection may have given up because of somebody else.
  if (!f.timed_out()) {
    int shm_blamed = -1;
    std::string shm_why;
    if (shm_ && shm_->aborted(&shm_blamed, &shm_why) && shm_blamed >= 0) {
      blamed = shm_blamed;
      why = shm_why;
    } else {
      try {
        const std::vector<std::string> k{"abort"};
        if (store_.check(k)) {
          const std::string v = store_.get("abort");
          const size_t nl = v.find('\n');
          blamed = std::stoi(v.substr(0, nl));
          why = nl == std::string::npos ? v : v.substr(nl + 1);
        }
      } catch (const std::exception&) {
        // The store is unreachable too: keep our own verdict.
      }
    }
  }
  if (shm_) shm_->abort(blamed, why);
  try {
    store_.compare_set("abort", "", std::to_string(blamed) + "\n" + why);
  } catch (const std::exception&) {
  }
  if (mesh_) mesh_->shutdown_all();
  failure_ = describe(call) + ": " + why;
  component_logger("runtime", "warning")->warn("{}", failure_);
  throw CollectiveError(failure_, blamed);
}

template <typename Fn>
void CpuProcessGroup::run(const Call& call, Fn&& fn) {
  if (!failure_.empty()) {
    throw CollectiveError(
        std::string("cohort: ") + call.op + ": the process group failed earlier: " + failure_, -1);
  }
  heartbeat();
  progress_->enter(call.op, call.dtype, call.count);
  try {
    fn();
  } catch (const PeerFailure& f) {
    progress_->leave();
    fail(call, f);
  }
  progress_->leave();
  heartbeat();
}

void CpuProcessGroup::column_allreduce(void* data, size_t count, DataType type, Op op,
                                       const Call& call) {
  const size_t bytes = count * dtype_size(type);
  if (bytes * static_cast<size_t>(mesh_->size() - 1) <= small_bytes(kTcpDirectBytes)) {
    detail::tcp_allreduce_direct(*mesh_, data, count, type, op, scratch2_, call);
  } else {
    detail::tcp_allreduce_ring(*mesh_, data, count, type, op, scratch2_, call);
  }
}

void CpuProcessGroup::allreduce_impl(void* data, size_t count, DataType type, Op op, int divisor,
                                     const Call& call) {
  const size_t bytes = count * dtype_size(type);
  switch (topo_.mode) {
    case Topology::Mode::kSingle:
      detail::divide(data, count, type, divisor);
      return;
    case Topology::Mode::kShm:
      if (bytes <= small_bytes(kShmSmallBytes)) {
        detail::shm_allreduce_small(*shm_, data, count, type, op, divisor, call);
      } else {
        detail::shm_allreduce(*shm_, data, count, type, op, divisor, shm_->local_size(), {}, call);
      }
      return;
    case Topology::Mode::kTcp:
      column_allreduce(data, count, type, op, call);
      detail::divide(data, count, type, divisor);
      return;
    case Topology::Mode::kHierarchical: {
      detail::SliceHook cross;
      if (mesh_) {
        cross = [&](void* slice, size_t n) { column_allreduce(slice, n, type, op, call); };
      }
      if (shm_) {
        detail::shm_allreduce(*shm_, data, count, type, op, divisor, topo_.columns, cross, call);
      } else {
        // Alone on this host (so there is one column): step through the same rounds as the
        // hosts that go through shared memory, so the column's ring steps line up.
        const size_t chunk = options_.shm_slot_bytes / dtype_size(type);
        char* p = static_cast<char*>(data);
        for (size_t done = 0; done < count; done += chunk) {
          const size_t len = std::min(chunk, count - done);
          cross(p + done * dtype_size(type), len);
          detail::divide(p + done * dtype_size(type), len, type, divisor);
        }
      }
      return;
    }
  }
}

void CpuProcessGroup::allreduce(void* data, size_t count, DataType type, ReduceOp op) {
  const Call call = make_call("allreduce", type, count, options_.timeout);
  if (count > 0 && data == nullptr) throw Error("cohort: allreduce of a null buffer");
  run(call, [&] {
    if (count == 0) return;
    allreduce_impl(data, count, type, detail::kernel_op(op), op == ReduceOp::kAvg ? topo_.size : 1,
                   call);
  });
}

void CpuProcessGroup::broadcast(void* data, size_t count, DataType type, int root) {
  const Call call = make_call("broadcast", type, count, options_.timeout);
  if (root < 0 || root >= topo_.size) {
    throw Error("cohort: broadcast root " + std::to_string(root) + " is not in a group of " +
                std::to_string(topo_.size));
  }
  if (count > 0 && data == nullptr) throw Error("cohort: broadcast of a null buffer");
  run(call, [&] {
    const size_t bytes = count * dtype_size(type);
    if (bytes == 0) return;
    switch (topo_.mode) {
      case Topology::Mode::kSingle:
        return;
      case Topology::Mode::kShm:
        return detail::shm_broadcast(*shm_, data, bytes, root, call);
      case Topology::Mode::kTcp:
        return detail::tcp_broadcast(*mesh_, data, bytes, root, call);
      case Topology::Mode::kHierarchical:
        // Everyone but the root contributes zeros; OR-reducing the bytes yields the root's.
        if (topo_.rank != root) std::memset(data, 0, bytes);
        return allreduce_impl(data, count, type, Op::kBitOr, 1, call);
    }
  });
}

void CpuProcessGroup::allgather(const void* in, void* out, size_t count, DataType type) {
  const Call call = make_call("allgather", type, count, options_.timeout);
  if (count > 0 && (in == nullptr || out == nullptr)) {
    throw Error("cohort: allgather of a null buffer");
  }
  run(call, [&] {
    const size_t bytes = count * dtype_size(type);
    if (bytes == 0) return;
    char* o = static_cast<char*>(out);
    switch (topo_.mode) {
      case Topology::Mode::kSingle:
        if (in != out) std::memmove(out, in, bytes);
        return;
      case Topology::Mode::kShm:
        return detail::shm_allgather(*shm_, in, out, bytes, call);
      case Topology::Mode::kTcp:
        return detail::tcp_allgather_ring(*mesh_, in, out, bytes, call);
      case Topology::Mode::kHierarchical: {
        char* mine = o + static_cast<size_t>(topo_.rank) * bytes;
        if (in != mine) std::memmove(mine, in, bytes);
        std::memset(o, 0, mine - o);
        std::memset(mine + bytes, 0, static_cast<size_t>(topo_.size - topo_.rank - 1) * bytes);
        return allreduce_impl(out, count * static_cast<size_t>(topo_.size), type, Op::kBitOr, 1,
                              call);
      }
    }
  });
}

void CpuProcessGroup::reduce_scatter(const void* in, void* out, size_t count, DataType type,
                                     ReduceOp op) {
  const Call call = make_call("reduce_scatter", type, count, options_.timeout);
  if (count > 0 && (in == nullptr || out == nullptr)) {
    throw Error("cohort: reduce_scatter of a null buffer");
  }
  run(call, [&] {
    if (count == 0) return;
    const size_t bytes = count * dtype_size(type);
    const int divisor = op == ReduceOp::kAvg ? topo_.size : 1;
    const Op kop = detail::kernel_op(op);
    switch (topo_.mode) {
      case Topology::Mode::kSingle:
        if (in != out) std::memmove(out, in, bytes);
        return;
      case Topology::Mode::kShm:
        return detail::shm_reduce_scatter(*shm_, in, out, count, type, kop, divisor, call);
      case Topology::Mode::kTcp:
        detail::tcp_reduce_scatter_ring(*mesh_, in, out, count, type, kop, scratch_, call);
        return detail::divide(out, count, type, divisor);
      case Topology::Mode::kHierarchical: {
        const size_t total = bytes * static_cast<size_t>(topo_.size);
        scratch_.resize(std::max(scratch_.size(), total));
        std::memcpy(scratch_.data(), in, total);
        allreduce_impl(scratch_.data(), count * static_cast<size_t>(topo_.size), type, kop, divisor,
                       call);
        std::memcpy(out, scratch_.data() + static_cast<size_t>(topo_.rank) * bytes, bytes);
        return;
      }
    }
  });
}

void CpuProcessGroup::barrier() {
  const Call call = make_call("barrier", DataType::kFloat32, 0, options_.timeout);
  run(call, [&] {
    switch (topo_.mode) {
      case Topology::Mode::kSingle:
        return;
      case Topology::Mode::kShm:
        return shm_->barrier(call);
      case Topology::Mode::kTcp:
        return detail::tcp_barrier(*mesh_, call);
      case Topology::Mode::kHierarchical:
        if (shm_) shm_->barrier(call);
        if (mesh_ && topo_.local == 0) detail::tcp_barrier(*mesh_, call);
        if (shm_) shm_->barrier(call);
        return;
    }
  });
}

std::unique_ptr<ProcessGroup> CpuProcessGroup::new_group(std::vector<int> ranks) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= topo_.size || (i > 0 && ranks[i] <= ranks[i - 1])) {
      throw Error("cohort: new_group: ranks must be sorted, unique and below " +
                  std::to_string(topo_.size));
    }
  }
  if (ranks.empty()) throw Error("cohort: new_group: empty rank list");
  const int k = subgroups_++;
  auto it = std::find(ranks.begin(), ranks.end(), topo_.rank);
  if (it == ranks.end()) return nullptr;
  std::vector<std::string> hosts;
  std::vector<int> globals;
  for (int r : ranks) {
    hosts.push_back(host_ids_[r]);
    globals.push_back(global_ranks_[r]);
  }
  ProcessGroupOptions o = options_;
  o.segment_tag = options_.segment_tag + "s" + std::to_string(k);
  return create(store_, "sub" + std::to_string(k), static_cast<int>(it - ranks.begin()),
                static_cast<int>(ranks.size()), o, my_host_, std::move(hosts), std::move(globals),
                name_ + "/" + std::to_string(k));
}

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string ns_inode(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 ? std::to_string(st.st_ino) : "?";
}

}  // namespace

std::string default_host_identity() {
  return hostname() + "/" + read_first_line("/proc/sys/kernel/random/boot_id") + "/net" +
         ns_inode("/proc/self/ns/net") + "/mnt" + ns_inode("/proc/self/ns/mnt");
}

std::unique_ptr<ProcessGroup> new_cpu_process_group(Store& store, int rank, int size,
                                                    const ProcessGroupOptions& options,
                                                    const std::string& host_identity) {
  return CpuProcessGroup::create(store, "cpu_pg", rank, size, options, host_identity, {}, {},
                                 "cohort/0");
}

std::unique_ptr<ProcessGroup> new_cpu_process_group(Context& context,
                                                    const ProcessGroupOptions& options) {
  const WorkerIdentity& id = context.identity();
  ProcessGroupOptions o = options;
  if (id.timeout_from_env) o.timeout = id.timeout;
  if (o.listen_host.empty()) o.listen_host = id.socket_addr;
  if (o.listen_host.empty() && id.source != "single") {
    // Where peers on other hosts reach this one: the interface that routes to the store's host.
    o.listen_host = local_address_towards(id.master_addr, id.master_port);
  }
  if (o.segment_tag.empty()) {
    o.segment_tag = sanitize(id.run_id) + "-" + std::to_string(id.restart_count);
  }
  const uint64_t group = context.next_group_id();
  o.segment_tag += "-g" + std::to_string(group);
  return CpuProcessGroup::create(context.store(), "cpu_pg/" + std::to_string(group), id.rank,
                                 id.world_size, o, default_host_identity(), {}, {},
                                 "cohort/" + std::to_string(group));
}

}  // namespace cohort
