// ErrorFileReader: reads workers' error files off the event loop, each within a time limit.
//
// read_error_file() never waits for a FIFO's writer, but a file system can still hold it (a hung
// NFS mount, a FUSE daemon that stopped answering), and a loop held there forwards no output,
// sees no exit and acts on no signal. Each read runs on a thread of its own; past the limit the
// loop goes on with a content saying the file could not be read in time, and the thread is left
// to end when the file system answers (it is detached: no one can end a system call stuck in a
// hung mount, and joining it would hold the agent there). A detached thread holds only its own
// copies and a shared handle through which it posts its result, which the reader's destructor
// cuts, so nothing it touches goes away under it.
//
// Thread safety: construct, read() and destroy on the loop's thread; callbacks run there.
#pragma once

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

  // Reads `path` (read_error_file) and calls done(content) on the loop, within the limit.
  void read(std::string path, Done done);

 private:
  struct Shared;
  struct Pending;
  void settle(const std::shared_ptr<Pending>& p, std::optional<ErrorFileContent> content);

  LoopClock& clock_;
  std::chrono::milliseconds limit_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::shared_ptr<Pending>> pending_;  // reads not yet settled
};

}  // namespace cohort::launch
