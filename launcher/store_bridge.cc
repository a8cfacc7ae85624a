#include "store_bridge.h"

#include <pthread.h>

#include <asio/post.hpp>

namespace cohort::launch {

StoreBridge::StoreBridge(asio::any_io_executor loop, const TcpStoreOptions& options,
                         const std::string& run_id, int nnodes)
    : loop_(std::move(loop)),
      options_(options),
      nnodes_(nnodes),
      run_prefix_(keys::run_prefix(run_id)),
      watch_generation_(std::make_shared<std::atomic<int>>(0)) {
  options_.abandon = &abandon_;
  ops_worker_.thread = std::thread([this] { run(ops_worker_, "cohort-store"); });
  watch_worker_.thread = std::thread([this] { run(watch_worker_, "cohort-watch"); });
}

StoreBridge::~StoreBridge() {
  for (Worker* w : {&ops_worker_, &watch_worker_}) {
    std::lock_guard lock(w->mu);
    w->stopping = true;
    w->jobs.clear();
    w->cv.notify_all();
  }
  // A watch may be blocked on a key nobody will write any more, or a connect may still wait.
  ++*watch_generation_;
  abandon_ = true;
  for (Worker* w : {&ops_worker_, &watch_worker_}) {
    std::lock_guard lock(w->conn_mu);
    if (w->conn) w->conn->interrupt();
  }
  ops_worker_.thread.join();
  watch_worker_.thread.join();
}

void StoreBridge::run(Worker& w, const char* name) {
  pthread_setname_np(pthread_self(), name);
  for (;;) {
    Job job;
    {
      std::unique_lock lock(w.mu);
      w.cv.wait(lock, [&] { return w.stopping || !w.jobs.empty(); });
      if (w.stopping) return;
      job = std::move(w.jobs.front());
      w.jobs.pop_front();
    }
    job();
  }
}

PrefixStore& StoreBridge::store(Worker& w) {
  if (!w.store) {
    auto conn = std::make_unique<TcpStore>(options_);  // throws StoreError
    std::lock_guard lock(w.conn_mu);
    w.conn = std::move(conn);
    w.store = std::make_unique<PrefixStore>(run_prefix_, *w.conn);
    if (abandon_) w.conn->interrupt();
  }
  return *w.store;
}

void StoreBridge::submit(Worker& w, Job job) {
  std::lock_guard lock(w.mu);
  w.jobs.push_back(std::move(job));
  w.cv.notify_one();
}

void StoreBridge::to_loop(std::function<void()> fn) { asio::post(loop_, std::move(fn)); }

void StoreBridge::rendezvous(int attempt, NodeInfo self, std::chrono::milliseconds timeout,
                             std::function<void(std::exception_ptr, RankAssignment)> done) {
  submit(ops_worker_, [this, attempt, self, timeout, done = std::move(done)] {
    std::exception_ptr err;
    RankAssignment a;
    try {
      PrefixStore& ops = store(ops_worker_);
      ops.set(keys::node(attempt, self.node_rank), to_json(self));
      std::vector<std::string> node_keys;
      for (int i = 0; i < nnodes_; ++i) node_keys.push_back(keys::node(attempt, i));
      try {
        ops.wait(node_keys, timeout);
      } catch (const StoreTimeoutError&) {
        std::string missing;
        for (int i = 0; i < nnodes_; ++i) {
          std::vector<std::string> one{keys::node(attempt, i)};
          if (!ops.check(one)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
        }
        throw StoreTimeoutError("rendezvous timed out after " +
                                    std::to_string(timeout.count() / 1000) +
                                    " s: node rank(s) " + missing + " of " +
                                    std::to_string(nnodes_) + " did not join",
                                "", options_.host + ":" + std::to_string(options_.port));
      }
      std::vector<NodeInfo> nodes;
      for (const auto& text : ops.multi_get(node_keys)) nodes.push_back(node_info_from_json(text));
      a = assign_ranks(nodes, self.node_rank, attempt);
    } catch (...) {
      err = std::current_exception();
    }
    to_loop([done, err, a] { done(err, a); });
  });
}

void StoreBridge::publish_failure(int attempt, int node_rank, std::vector<WorkerFailure> failures,
                                  Done done) {
  submit(ops_worker_, [this, attempt, node_rank, failures = std::move(failures), done] {
    std::exception_ptr err;
    try {
      PrefixStore& ops = store(ops_worker_);
      ops.set(keys::failures(attempt, node_rank), to_json(failures));
      Outcome o;
      o.kind = Outcome::kFailed;
      o.node_rank = node_rank;
      if (!failures.empty()) o.first_failure = failures.front();
      ops.compare_set(keys::outcome(attempt), "", to_json(o));
    } catch (...) {
      err = std::current_exception();
    }
    to_loop([done, err] { done(err); });
  });
}

void StoreBridge::publish_success(int attempt, int node_rank, Done done) {
  submit(ops_worker_, [this, attempt, node_rank, done] {
    std::exception_ptr err;
    try {
      PrefixStore& ops = store(ops_worker_);
      if (ops.add(keys::done_count(attempt), 1) == nnodes_) {
        Outcome o;
        o.kind = Outcome::kSucceeded;
        o.node_rank = node_rank;
        ops.compare_set(keys::outcome(attempt), "", to_json(o));
      }
    } catch (...) {
      err = std::current_exception();
    }
    to_loop([done, err] { done(err); });
  });
}

void StoreBridge::publish_abort(int attempt, int node_rank, std::string detail, Done done) {
  submit(ops_worker_, [this, attempt, node_rank, detail, done] {
    std::exception_ptr err;
    try {
      PrefixStore& ops = store(ops_worker_);
      Outcome o;
      o.kind = Outcome::kAborted;
      o.node_rank = node_rank;
      o.detail = detail + " on node " + std::to_string(node_rank);
      ops.compare_set(keys::outcome(attempt), "", to_json(o));
    } catch (...) {
      err = std::current_exception();
    }
    to_loop([done, err] { done(err); });
  });
}

void StoreBridge::collect_failures(
    int attempt, std::function<void(std::exception_ptr, std::vector<WorkerFailure>)> done) {
  submit(ops_worker_, [this, attempt, done] {
    std::exception_ptr err;
    std::vector<WorkerFailure> all;
    try {
      PrefixStore& ops = store(ops_worker_);
      for (int i = 0; i < nnodes_; ++i) {
        std::vector<std::string> k{keys::failures(attempt, i)};
        if (!ops.check(k)) continue;
        for (auto& f : failures_from_json(ops.get(k[0]))) all.push_back(std::move(f));
      }
    } catch (...) {
      err = std::current_exception();
    }
    to_loop([done, err, all] { done(err, all); });
  });
}

void StoreBridge::exit_barrier(int attempt, bool wait_for_all, std::chrono::milliseconds timeout,
                               Done done) {
  submit(ops_worker_, [this, attempt, wait_for_all, timeout, done] {
    std::exception_ptr err;
    try {
      PrefixStore& ops = store(ops_worker_);
      std::string all_out = keys::exit_count(attempt) + "/all";
      if (ops.add(keys::exit_count(attempt), 1) == nnodes_) ops.set(all_out, "1");
      if (wait_for_all) {
        std::vector<std::string> k{all_out};
        ops.wait(k, timeout);
      }
    } catch (...) {
      err = std::current_exception();
    }
    to_loop([done, err] { done(err); });
  });
}

void StoreBridge::watch_outcome(int attempt, std::function<void(Outcome)> on_outcome,
                                std::function<void(std::string)> on_error) {
  int generation = ++*watch_generation_;
  auto current = watch_generation_;
  submit(watch_worker_, [this, attempt, generation, current, on_outcome, on_error] {
    if (*current != generation) return;
    try {
      PrefixStore& watch = store(watch_worker_);
      std::vector<std::string> k{keys::outcome(attempt)};
      watch.wait(k, std::chrono::hours(24 * 365));
      Outcome o = outcome_from_json(watch.get(k[0]));
      to_loop([current, generation, on_outcome, o] {
        if (*current == generation) on_outcome(o);
      });
    } catch (const std::exception& e) {
      std::string what = e.what();
      to_loop([current, generation, on_error, what] {
        if (*current == generation) on_error(what);
      });
    }
  });
}

}  // namespace cohort::launch
