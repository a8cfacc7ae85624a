// ErrorFileReader: reads workers' error files off the event loop, each within a time limit.
//
// read_error_file() never waits for a FIFO's writer, but a file system can still hold it (a hung
// NFS mount, a FUSE daemon that stopped answering), and a loop held there forwards no output,
// sees no exit and acts on no signal. Each read runs in a child process of its own (fork: system
// calls only, write_bounded_file), whose result the loop reads from a pipe; past the limit the
// loop goes on with a content saying the file could not be read in time. Not a thread: a thread
// waiting on a FUSE request that its daemon has taken cannot be woken, not even by SIGKILL
// (fs/fuse/dev.c, request_wait_answer), and the kernel ends a process only when its last thread
// has left the kernel, so one such thread held cohortrun's exit for as long as the mount hung. A
// child stuck there holds nothing of ours: it is sent SIGKILL at the limit (which ends it when
// the file system answers, or at once where the wait is killable, as NFS's is), and is reaped
// whenever it ends, by the reader while it lives, else as a stray (descendants.h).
//
// Thread safety: construct, read() and destroy on the loop's thread; callbacks run there.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "failure/error_file.h"
#include "loop/loop_clock.h"

namespace cohort::launch {

class ErrorFileReader {
 public:
  using Done = std::function<void(std::optional<ErrorFileContent>)>;

  // `io` and `clock` (the limit's timers) must outlive the reader.
  ErrorFileReader(asio::io_context& io, LoopClock& clock, std::chrono::milliseconds limit);
  ~ErrorFileReader();  // later results and limits are never delivered
  ErrorFileReader(const ErrorFileReader&) = delete;
  ErrorFileReader& operator=(const ErrorFileReader&) = delete;

  // Reads `path` (read_error_file) and calls done(content) on the loop, within the limit; never
  // from inside read().
  void read(std::string path, Done done);

  // The reading processes not yet reaped: children of this process that are not strays to kill
  // (descendants.h), including those stuck past their limit.
  std::vector<pid_t> children() const;

 private:
  struct Read;
  void settle(Read& r, std::optional<ErrorFileContent> content);
  void read_output(const std::shared_ptr<Read>& r);
  void watch_exit(const std::shared_ptr<Read>& r);

  asio::io_context& io_;
  LoopClock& clock_;
  std::chrono::milliseconds limit_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // handlers hold it weakly
  std::vector<std::shared_ptr<Read>> reads_;               // until the child is reaped
};

}  // namespace cohort::launch
