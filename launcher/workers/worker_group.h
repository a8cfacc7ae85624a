// WorkerGroup: one round's workers on this node, and everything that reads from or waits on them.
//
// The group starts every worker (ProcessSpawner), owns their pidfds, output pumps, tails,
// heartbeat pipes, control sockets and hang timers, and reports what happens as events: a worker
// exited (with its failure, built here and only here, when it failed), hung (stopped beating for
// the hang timeout), or fell silent (a worker that answers hang probes: the caller asks the whole
// job before it judges, probe()). Events are posted to the loop, never delivered from inside a
// group method, so an event handler may destroy the group. Nothing outlives the group: its
// destructor kills what still runs, stops every pump and cancels every timer, and no event is
// delivered after it.
//
// A worker's exit is reported once its output has drained (so that the failure's tail is
// complete), or after `drain_grace` when a descendant that escaped the worker's process group
// keeps the pipes open.
//
// Thread safety: the loop's thread only.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/heartbeat_line.h"
#include "failure/error_file_reader.h"
#include "failure/failure.h"
#include "loop/loop_clock.h"
#include "workers/output.h"
#include "workers/process_spawner.h"

namespace cohort::launch {

// One worker to start.
struct WorkerSpec {
  int local_rank = 0;
  SpawnRequest request;
  std::string dir;          // created before the worker starts ("" = none)
  std::string error_file;   // its TORCHELASTIC_ERROR_FILE, read when it fails ("" = none)
  PumpRoute stdout_route;   // for a piped stdout; file_fd filled from stdout_file
  PumpRoute stderr_route;   // for a piped stderr
  std::string stdout_file;  // log file for the stream ("" = none); opened by the group
  std::string stderr_file;
  // PyTorch's NCCL dump pipe and dump file (TORCH_NCCL_DEBUG_INFO_PIPE_FILE and _TEMP_FILE, as
  // given to the worker; "" = none): a hung NCCL worker that cannot answer a probe is asked for
  // its Flight Recorder there, by writing to <stem><rank>.pipe, before its stack is asked for.
  std::string nccl_pipe_stem;
  std::string nccl_dump_prefix;
};

struct GroupSpec {
  int node_rank = 0;
  int base_rank = 0;  // global rank of local rank 0
  std::string host;
  std::vector<WorkerSpec> workers;  // local ranks 0..n-1, in order
  // A worker that has beaten once and then stays silent this long is hung (0: off). Before it is
  // reported, it is asked for its stack (`stack_signal` to its main process: Python's
  // faulthandler and libcohort's fatal-signal handler print every thread's), and given up to
  // `stack_grace` to write it and end; the hung failure then carries that stack.
  std::chrono::milliseconds hang_timeout{0};
  // A worker that answers hang probes (its hello says so, cohort/base/heartbeat_line.h) is not
  // judged alone: silent this long since its last beat, or since its hello when it never beat,
  // it is reported silent, and the caller probes (0: hang_timeout).
  std::chrono::milliseconds probe_silence{0};
  int stack_signal = SIGABRT;
  std::chrono::milliseconds stack_grace{3000};
  std::chrono::milliseconds drain_grace{200};
  // A worker whose main process stays in uninterruptible sleep (D state: a hung driver call, a
  // dead NFS mount) this long is reported wedged (0: off). It cannot be stopped cleanly and a new
  // worker would contend for what it holds, so the job ends without a restart, as under torchrun
  // 2.x's TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT.
  std::chrono::milliseconds uninterruptible_timeout{0};
};

struct WorkerGroupEvents {
  // Worker `local_rank` exited; `failure` when it failed (non-zero exit, a signal, or it could
  // not be started).
  std::function<void(int local_rank, std::optional<WorkerFailure> failure)> exited;
  // Worker `local_rank` stopped beating; it still runs.
  std::function<void(int local_rank, WorkerFailure failure)> hung;
  // Worker `local_rank` has been in uninterruptible sleep for the timeout; it still runs.
  std::function<void(int local_rank, WorkerFailure failure)> wedged;
  // Worker `local_rank`, which answers hang probes, has been silent for the probe timeout; it
  // still runs, and is not judged: the caller probes the job. Again only after its next beat.
  // Without this event, such a worker is judged by its beats as any other.
  std::function<void(int local_rank)> silent;
  // A worker's process started (pid) or was reaped: for the reaper's list. Optional; called
  // directly, not posted.
  std::function<void(pid_t)> started;
  std::function<void(pid_t)> reaped;
};

// What the group knows about one worker now (metrics, the node's status record).
struct WorkerReading {
  int local_rank = 0;
  pid_t pid = -1;  // -1 before it started
  bool running = false;
  bool failed = false;  // exited and reported with a failure status
  std::optional<std::chrono::steady_clock::time_point> last_beat;
  // Whether it beat by hand (its own code, not only the worker module's optimizer hook:
  // heartbeat_line.h), a promise that it beats through every phase.
  bool beaten_by_hand = false;
  std::optional<heartbeat_pipe::StepReport> last_step;
  // When the process holding its descriptors said hello, and whether it answers hang probes.
  std::optional<std::chrono::steady_clock::time_point> hello_at;
  bool answers_probes = false;
};

// One worker's answer to a hang probe (cohort/base/hang_probe.h), or why there is none.
struct ProbeReply {
  int local_rank = 0;
  pid_t pid = -1;  // the process that answered (its hello's), else the worker's
  bool running = false;
  std::optional<std::string> answer;  // the answer line, without its newline
  std::string no_answer;              // why there is none, in words
};

// A faster way to start some workers than the spawner (a fork server, fork_servers.h), in two
// steps so that several start at once: begin() asks for local rank's worker (false: it cannot;
// the spawner starts it), finish() returns it (nullopt: it did not start; the spawner starts it).
class WorkerForker {
 public:
  virtual ~WorkerForker() = default;
  virtual bool begin(int local_rank, const SpawnRequest& request) = 0;
  virtual std::optional<SpawnedProcess> finish(int local_rank) = 0;
};

class WorkerGroup {
 public:
  // `io`, `clock`, `spawner`, `error_files` (which reads a failed worker's error file, and
  // outlives groups: a read stuck in a hung mount can outlast its group) and `forker` (optional)
  // must outlive the group. Nothing starts until start().
  WorkerGroup(asio::io_context& io, LoopClock& clock, ProcessSpawner& spawner,
              ErrorFileReader& error_files, GroupSpec spec, WorkerGroupEvents events,
              WorkerForker* forker = nullptr);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every worker. One that cannot start is reported as exited with a failure.
  void start();
  // Sends `sig` to the process group of every worker still running.
  void signal(int sig);
  // True while any worker has not been reaped.
  bool any_running() const;
  // Pids of the workers not yet reaped.
  std::vector<pid_t> running_pids() const;
  // The caller judged worker `local_rank` hung (`reason`, and the ranks that waited for it) but
  // has no stack of it: it is asked for one (stack_signal) and reported hung as one that stopped
  // beating is, with this reason. An NCCL worker is first asked for its Flight Recorder dump
  // through PyTorch's pipe (up to kNcclDumpWait); the failure names the dump's file.
  void report_hung_with_stack(int local_rank, std::string reason, std::vector<std::string> waiting);
  // A FileTimerClient's timer (`scope`) of process `pid` expired: when `pid` is a running worker
  // or in a worker's process group, sends it `sig` and returns true; that worker's failure then
  // says which timer expired. False (nothing sent) for a process that is none of this group's.
  bool signal_for_expired_timer(pid_t pid, const std::string& scope, int sig);
  const GroupSpec& spec() const { return spec_; }
  std::vector<WorkerReading> readings() const;
  // Asks every running worker that answers hang probes question `id` on its control socket;
  // `done` gets one reply per worker, in local-rank order, once all of them answered or
  // `deadline` passed (posted, as events are). A probe asked while another is in flight
  // replaces it (the earlier `done` never runs); answers to earlier questions are dropped.
  void probe(int64_t id, std::chrono::milliseconds deadline,
             std::function<void(std::vector<ProbeReply>)> done);

 private:
  struct Worker;
  void spawn(Worker& w, bool forking);
  void watch_exit(Worker& w);
  void read_heartbeat(Worker& w);
  // Arms the worker's hang timer (after a beat, or a hello with probes).
  void arm_hang_timer(Worker& w);
  void read_control(Worker& w);
  void take_answer(Worker& w, std::string line);
  void finish_probe_if_answered();
  void finish_probe();
  void on_exit(Worker& w);
  void report(Worker& w);
  // report()'s second half, once the error file (if any) is read.
  void finish_report(Worker& w, std::optional<ErrorFileContent> error_file);
  // Looks at every running worker's scheduler state; rearms itself.
  void watch_uninterruptible();
  // Stack request, then the hung report after the grace.
  void ask_for_stack(Worker& w);
  // Writes to the worker's NCCL dump pipes; returns how many took it.
  int poke_nccl_pipes(Worker& w);
  // The worker's NCCL Flight Recorder dumps that exist (non-empty files).
  std::vector<std::string> nccl_dumps(const Worker& w) const;
  void wait_for_nccl_dump(Worker& w);
  static constexpr std::chrono::milliseconds kNcclDumpWait{5000};
  // The worker's hang, with what it said about it so far.
  void report_hung(Worker& w, std::optional<WorkerFailure> exit);
  FailureSite site(const Worker& w) const;
  // Posts `event` to the loop; it runs only while the group lives.
  void post(std::function<void()> event);

  asio::io_context& io_;
  LoopClock& clock_;
  ProcessSpawner& spawner_;
  WorkerForker* forker_;
  GroupSpec spec_;
  WorkerGroupEvents events_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<LoopTimer> state_timer_;  // watch_uninterruptible()'s
  // The probe in flight.
  int64_t probe_id_ = -1;
  std::function<void(std::vector<ProbeReply>)> probe_done_;
  std::unique_ptr<LoopTimer> probe_timer_;
  ErrorFileReader& error_files_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // posted work checks it
};

}  // namespace cohort::launch
