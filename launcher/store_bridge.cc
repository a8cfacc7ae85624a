#include "store_bridge.h"

#include <pthread.h>

#include <asio/post.hpp>

#include "round_ops.h"
#include "static_rendezvous.h"

namespace cohort::launch {

StoreBridge::StoreBridge(asio::any_io_executor loop, StoreFactory factory, std::string run_prefix)
    : loop_(std::move(loop)),
      factory_(std::move(factory)),
      run_prefix_(std::move(run_prefix)),
      watch_generation_(std::make_shared<std::atomic<int>>(0)) {
  ops_worker_.thread = std::thread([this] { work(ops_worker_, "cohort-store"); });
  watch_worker_.thread = std::thread([this] { work(watch_worker_, "cohort-watch"); });
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

void StoreBridge::work(Worker& w, const char* name) {
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

Store& StoreBridge::store(Worker& w) {
  if (!w.store) {
    auto conn = factory_(&abandon_);  // throws StoreError
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

void StoreBridge::run(std::function<void(Store&)> op, Done done) {
  submit(ops_worker_, [this, op = std::move(op), done = std::move(done)] {
    std::exception_ptr err;
    try {
      op(store(ops_worker_));
    } catch (...) {
      err = std::current_exception();
    }
    asio::post(loop_, [done, err] { done(err); });
  });
}

void StoreBridge::watch_outcome(int round, std::function<void(Outcome)> on_outcome,
                                std::function<void(std::string)> on_error) {
  int generation = ++*watch_generation_;
  auto current = watch_generation_;
  submit(watch_worker_, [this, round, generation, current, on_outcome, on_error] {
    if (*current != generation) return;
    try {
      Store& watch = store(watch_worker_);
      std::vector<std::string> k{keys::outcome(round)};
      watch.wait(k, std::chrono::hours(24 * 365));
      Outcome o = outcome_from_json(watch.get(k[0]));
      asio::post(loop_, [current, generation, on_outcome, o] {
        if (*current == generation) on_outcome(o);
      });
    } catch (const std::exception& e) {
      std::string what = e.what();
      asio::post(loop_, [current, generation, on_error, what] {
        if (*current == generation) on_error(what);
      });
    }
  });
}

}  // namespace cohort::launch
