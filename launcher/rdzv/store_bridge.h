// StoreBridge: the agent's store operations, off the event loop.
//
// Store calls block (a rendezvous can wait for minutes), and the loop must keep forwarding output
// and watching children meanwhile. The bridge owns four threads, each with its own connection made
// by the factory: "cohort-store" runs operations in order; "cohort-watch" blocks on one key at a
// time (watch()); "cohort-urgent" runs what must not queue behind a blocked call (run_urgent():
// an abort published while a rendezvous still waits); "cohort-status" runs the node's status
// records (run_status()), which must neither wait behind an elastic agent's blocking membership
// watch nor hold up an abort while the store is out of reach. Results are posted back to the loop's
// executor. The bridge knows nothing of what the keys mean. Joined in the destructor, which
// interrupts whatever call is still blocked and drops what is still queued (the owner is going
// away: no callback of a dropped operation runs); drop_queued() first gives every queued
// operation's callback an error instead, for an owner that goes on without this bridge.
//
// Thread safety: call the public methods from the loop thread; callbacks run on the loop thread.
#pragma once

#include <asio/any_io_executor.hpp>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cohort/rdzv/prefix_store.h"

namespace cohort::launch {

class StoreBridge {
 public:
  // Makes a connected store; `abandon` turns true when the bridge shuts down (stop retrying).
  using StoreFactory = std::function<std::unique_ptr<Store>(const std::atomic<bool>* abandon)>;
  using Done = std::function<void(std::exception_ptr)>;

  // Starts the threads; each connects on its first job. Every key is scoped to `run_prefix`.
  // Connection failures reach the callbacks as exceptions (StoreError).
  StoreBridge(asio::any_io_executor loop, StoreFactory factory, std::string run_prefix);
  ~StoreBridge();

  // Runs op(store) on the store thread, then done(error) on the loop.
  void run(std::function<void(Store&)> op, Done done);
  // The same on a thread and connection of their own, so that it does not wait for the store
  // thread's current call.
  void run_urgent(std::function<void(Store&)> op, Done done);

  // The same on the status records' thread and connection.
  void run_status(std::function<void(Store&)> op, Done done);
  // The same, with the store's whole keyspace rather than the run's (the lobby, rdzv/lobby.h).
  void run_status_unscoped(std::function<void(Store&)> op, Done done);
  // Runs op(store) on the store thread, then done(error, result) on the loop.
  template <typename T>
  void call(std::function<T(Store&)> op, std::function<void(std::exception_ptr, T)> done) {
    auto result = std::make_shared<T>();
    run([op = std::move(op), result](Store& s) { *result = op(s); },
        [done = std::move(done), result](std::exception_ptr err) {
          done(err, std::move(*result));
        });
  }

  // Waits (without a deadline) until `key` exists, then posts its value to `on_value`; a store
  // failure posts its message to `on_error`. Replaces any earlier watch: its callbacks never run.
  // The watch thread blocks on one key at a time, so the new watch begins only once the earlier
  // one's key exists (or its wait fails): replace a watch after its key appeared, as
  // JobRendezvous does (a round's outcome, then the next round's).
  void watch(std::string key, std::function<void(std::string)> on_value,
             std::function<void(std::string)> on_error);

  // Every operation still queued on any thread, not yet begun, is given up: its callback gets a
  // StoreError saying `why`, posted to the loop as results are. A call already running goes on
  // (the destructor interrupts it); the watch is left alone. For JobRendezvous::move_store(),
  // which replaces this bridge and must not leave a step waiting for a callback that never comes.
  void drop_queued(const std::string& why);

 private:
  struct Job {
    std::function<void()> run;
    // Posts the operation's callback with an error, when it is given up unrun; empty for the
    // watch (a replaced watch never calls back).
    std::function<void(std::exception_ptr)> give_up;
  };
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job> jobs;
    bool stopping = false;
    std::thread thread;
    std::mutex conn_mu;
    std::unique_ptr<Store> conn;         // made on the worker's thread; guarded by conn_mu
    std::unique_ptr<PrefixStore> store;  // the run's view of conn
  };
  void work(Worker& w, const char* name);
  void submit(Worker& w, Job job);
  // The worker's store, connecting on first use. Worker thread only.
  Store& store(Worker& w);

  asio::any_io_executor loop_;
  StoreFactory factory_;
  std::string run_prefix_;
  std::atomic<bool> abandon_{false};
  std::shared_ptr<std::atomic<int>> watch_generation_;
  void run_on(Worker& w, std::function<void(Store&)> op, Done done, bool unscoped = false);

  Worker ops_worker_;
  Worker watch_worker_;
  Worker urgent_worker_;
  Worker status_worker_;
};

}  // namespace cohort::launch
