#include "rdzv/store_bridge.h"

#include <pthread.h>

#include <asio/post.hpp>

#include "cohort/error.h"

namespace cohort::launch {

StoreBridge::StoreBridge(asio::any_io_executor loop, StoreFactory factory, std::string run_prefix)
    : loop_(std::move(loop)),
      factory_(std::move(factory)),
      run_prefix_(std::move(run_prefix)),
      watch_generation_(std::make_shared<std::atomic<int>>(0)) {
  ops_worker_.thread = std::thread([this] { work(ops_worker_, "cohort-store"); });
  watch_worker_.thread = std::thread([this] { work(watch_worker_, "cohort-watch"); });
  urgent_worker_.thread = std::thread([this] { work(urgent_worker_, "cohort-urgent"); });
  status_worker_.thread = std::thread([this] { work(status_worker_, "cohort-status"); });
}

StoreBridge::~StoreBridge() {
  for (Worker* w : {&ops_worker_, &watch_worker_, &urgent_worker_, &status_worker_}) {
    std::lock_guard lock(w->mu);
    w->stopping = true;
    w->jobs.clear();
    w->cv.notify_all();
  }
  // A watch may be blocked on a key nobody will write any more, or a connect may still wait.
  ++*watch_generation_;
  abandon_ = true;
  for (Worker* w : {&ops_worker_, &watch_worker_, &urgent_worker_, &status_worker_}) {
    std::lock_guard lock(w->conn_mu);
    if (w->conn) w->conn->interrupt();
  }
  ops_worker_.thread.join();
  watch_worker_.thread.join();
  urgent_worker_.thread.join();
  status_worker_.thread.join();
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
    job.run();
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

void StoreBridge::drop_queued(const std::string& why) {
  const auto error = std::make_exception_ptr(StoreError(why, "", ""));
  for (Worker* w : {&ops_worker_, &watch_worker_, &urgent_worker_, &status_worker_}) {
    std::deque<Job> dropped;
    {
      std::lock_guard lock(w->mu);
      dropped.swap(w->jobs);
    }
    for (Job& job : dropped) {
      if (job.give_up) job.give_up(error);
    }
  }
}

void StoreBridge::run(std::function<void(Store&)> op, Done done) {
  run_on(ops_worker_, std::move(op), std::move(done));
}

void StoreBridge::run_urgent(std::function<void(Store&)> op, Done done) {
  run_on(urgent_worker_, std::move(op), std::move(done));
}

void StoreBridge::run_status(std::function<void(Store&)> op, Done done) {
  run_on(status_worker_, std::move(op), std::move(done));
}

void StoreBridge::run_status_unscoped(std::function<void(Store&)> op, Done done) {
  run_on(status_worker_, std::move(op), std::move(done), true);
}

void StoreBridge::run_on(Worker& w, std::function<void(Store&)> op, Done done, bool unscoped) {
  Job job;
  job.give_up = [this, done](std::exception_ptr err) {
    asio::post(loop_, [done, err] { done(err); });
  };
  job.run = [this, &w, op = std::move(op), done = std::move(done), unscoped] {
    std::exception_ptr err;
    try {
      Store& scoped = store(w);
      op(unscoped ? *w.conn : scoped);
    } catch (...) {
      err = std::current_exception();
    }
    // Moved: the loop holds the only reference, so the exception is freed where it was read
    // (its reference count is invisible to ThreadSanitizer, which saw this thread free it).
    asio::post(loop_, [done, err = std::move(err)] { done(err); });
  };
  submit(w, std::move(job));
}

void StoreBridge::watch(std::string key, std::function<void(std::string)> on_value,
                        std::function<void(std::string)> on_error) {
  int generation = ++*watch_generation_;
  auto current = watch_generation_;
  Job job;  // no give_up: a watch that is replaced or dropped never calls back
  job.run = [this, key, generation, current, on_value, on_error] {
    if (*current != generation) return;
    try {
      Store& watch = store(watch_worker_);
      std::vector<std::string> k{key};
      watch.wait(k, std::chrono::hours(24 * 365));
      std::string value = watch.get(key);
      asio::post(loop_, [current, generation, on_value, value = std::move(value)] {
        if (*current == generation) on_value(value);
      });
    } catch (const std::exception& e) {
      std::string what = e.what();
      asio::post(loop_, [current, generation, on_error, what] {
        if (*current == generation) on_error(what);
      });
    }
  };
  submit(watch_worker_, std::move(job));
}

}  // namespace cohort::launch
