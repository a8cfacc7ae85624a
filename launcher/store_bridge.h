// StoreBridge: the agent's store operations, off the event loop.
//
// Store calls block (a rendezvous can wait for minutes), and the loop must keep forwarding
// output and watching children meanwhile. The bridge owns two threads, each with its own store
// connection: "cohort-store" runs requests in order; "cohort-watch" blocks on the outcome key of
// the current attempt. Results are posted back to the loop's executor. Joined in the destructor.
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
#include "cohort/rdzv/tcp_store.h"
#include "failure.h"
#include "static_rendezvous.h"

namespace cohort::launch {

class StoreBridge {
 public:
  // Starts the threads; each connects on its first job (retrying up to options.connect_timeout,
  // so a node may start before node 0's store is up). Every key is scoped to
  // keys::run_prefix(run_id). Connection failures reach the callbacks as StoreError.
  StoreBridge(asio::any_io_executor loop, const TcpStoreOptions& options, const std::string& run_id,
              int nnodes);
  ~StoreBridge();

  using Done = std::function<void(std::exception_ptr)>;

  // Publishes `self` for `attempt` and waits (up to `timeout`) for every node's record.
  void rendezvous(int attempt, NodeInfo self, std::chrono::milliseconds timeout,
                  std::function<void(std::exception_ptr, RankAssignment)> done);
  // Stores this node's failures and tries to decide the attempt as failed.
  void publish_failure(int attempt, int node_rank, std::vector<WorkerFailure> failures, Done done);
  // Counts this node as done; the last node decides the attempt as succeeded.
  void publish_success(int attempt, int node_rank, Done done);
  // Tries to decide the attempt as aborted.
  void publish_abort(int attempt, int node_rank, std::string detail, Done done);
  // Failure records that nodes published for `attempt` (nodes with none are skipped).
  void collect_failures(int attempt,
                        std::function<void(std::exception_ptr, std::vector<WorkerFailure>)> done);
  // Counts this node out of the job; on the hosting node, also waits (up to `timeout`) for all
  // nodes to do so, so the store outlives their last reads.
  void exit_barrier(int attempt, bool wait_for_all, std::chrono::milliseconds timeout, Done done);

  // Watches the outcome of `attempt` (replacing any earlier watch, whose callback then never
  // runs). `on_outcome` runs once the outcome is decided; `on_error` if the store is lost.
  void watch_outcome(int attempt, std::function<void(Outcome)> on_outcome,
                     std::function<void(std::string)> on_error);

 private:
  using Job = std::function<void()>;
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job> jobs;
    bool stopping = false;
    std::thread thread;
    std::unique_ptr<TcpStore> conn;      // made on the worker's thread; guarded by conn_mu
    std::unique_ptr<PrefixStore> store;  // the run's view of conn
    std::mutex conn_mu;
  };
  void run(Worker& w, const char* name);
  // The worker's store, connecting on first use. Worker thread only.
  PrefixStore& store(Worker& w);
  void submit(Worker& w, Job job);
  // Posts `fn` to the loop.
  void to_loop(std::function<void()> fn);

  asio::any_io_executor loop_;
  TcpStoreOptions options_;
  int nnodes_;
  std::string run_prefix_;
  std::atomic<bool> abandon_{false};
  std::shared_ptr<std::atomic<int>> watch_generation_;
  Worker ops_worker_;
  Worker watch_worker_;
};

}  // namespace cohort::launch
