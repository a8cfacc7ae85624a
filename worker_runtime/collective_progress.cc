#include "collective_progress.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "probe_server.h"

namespace cohort::detail {
namespace {

// Every live group. Leaked on purpose: the probe server's detached thread may read it while the
// process exits.
struct Registry {
  std::mutex mu;
  std::vector<const GroupProgress*> groups;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

GroupProgress::GroupProgress(std::string name, std::string backend, std::vector<int> global_ranks)
    : name_(std::move(name)), backend_(std::move(backend)), global_ranks_(std::move(global_ranks)) {
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().groups.push_back(this);
  }
  start_probe_server_once();
}

GroupProgress::~GroupProgress() {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto& g = registry().groups;
  g.erase(std::remove(g.begin(), g.end(), this), g.end());
}

void GroupProgress::enter(const char* op, DataType dtype, size_t count) {
  version_.fetch_add(1, std::memory_order_acq_rel);
  issued_.fetch_add(1, std::memory_order_relaxed);
  op_.store(op, std::memory_order_relaxed);
  dtype_.store(static_cast<int>(dtype), std::memory_order_relaxed);
  count_.store(count, std::memory_order_relaxed);
  since_ns_.store(wall_ns(), std::memory_order_relaxed);
  in_progress_.store(true, std::memory_order_relaxed);
  version_.fetch_add(1, std::memory_order_release);
}

void GroupProgress::leave() {
  version_.fetch_add(1, std::memory_order_acq_rel);
  in_progress_.store(false, std::memory_order_relaxed);
  last_op_.store(op_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  last_ns_.store(since_ns_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  version_.fetch_add(1, std::memory_order_release);
}

void GroupProgress::snapshot(hang_probe::GroupProgress* group,
                             std::vector<hang_probe::CollectiveEntry>* collectives) const {
  int64_t issued = 0, since = 0, last = 0;
  bool busy = false;
  const char *op = "", *last_op = "";
  DataType dtype = DataType::kFloat32;
  uint64_t count = 0;
  // A sequence lock: read until no write overlapped (bounded: a collective takes microseconds at
  // the least, and a torn read only costs the answer's precision).
  for (int tries = 0; tries < 100; ++tries) {
    const uint64_t v = version_.load(std::memory_order_acquire);
    issued = issued_.load(std::memory_order_relaxed);
    busy = in_progress_.load(std::memory_order_relaxed);
    op = op_.load(std::memory_order_relaxed);
    dtype = static_cast<DataType>(dtype_.load(std::memory_order_relaxed));
    count = count_.load(std::memory_order_relaxed);
    since = since_ns_.load(std::memory_order_relaxed);
    last_op = last_op_.load(std::memory_order_relaxed);
    last = last_ns_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (v % 2 == 0 && version_.load(std::memory_order_relaxed) == v) break;
  }
  group->name = name_;
  group->backend = backend_;
  group->ranks = global_ranks_;
  group->seq = issued;
  auto entry = [&](int64_t seq, const char* what, double at, bool done) {
    hang_probe::CollectiveEntry e;
    e.group = name_;
    e.seq = seq;
    e.op = what;
    e.since = at;
    e.done = done;
    e.state = done ? "completed" : "started";
    return e;
  };
  if (busy) {
    hang_probe::CollectiveEntry e = entry(issued, op, static_cast<double>(since) / 1e9, false);
    e.in_sizes = "[[" + std::to_string(count) + "]]";
    e.dtypes = "[\"" + std::string(dtype_name(dtype)) + "\"]";
    collectives->push_back(std::move(e));
    if (issued > 1 && last > 0)
      collectives->push_back(entry(issued - 1, last_op, static_cast<double>(last) / 1e9, true));
  } else if (issued > 0) {
    collectives->push_back(entry(issued, last_op, static_cast<double>(last) / 1e9, true));
  }
}

void snapshot_all_groups(std::vector<hang_probe::GroupProgress>* groups,
                         std::vector<hang_probe::CollectiveEntry>* collectives) {
  std::lock_guard<std::mutex> lock(registry().mu);
  for (const GroupProgress* g : registry().groups) {
    groups->emplace_back();
    g->snapshot(&groups->back(), collectives);
  }
}

}  // namespace cohort::detail
