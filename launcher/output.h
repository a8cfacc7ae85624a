// Workers' output: pipes read on the event loop, split into whole lines, and routed to the
// console (with torchrun's "[default0]:" prefix when teeing), to per-worker log files, and into a
// tail kept for the failure summary. Only whole lines are written, by one thread, so output of
// different workers never interleaves mid-line.
#pragma once

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <string>

namespace cohort::launch {

// The last lines of a stream (at most `max_lines`, and about `max_bytes`).
class TailBuffer {
 public:
  explicit TailBuffer(size_t max_lines = 30, size_t max_bytes = 8192)
      : max_lines_(max_lines), max_bytes_(max_bytes) {}
  void push(std::string_view line);
  std::string text() const;  // lines joined with '\n'
  bool empty() const { return lines_.empty(); }

 private:
  size_t max_lines_, max_bytes_, bytes_ = 0;
  std::deque<std::string> lines_;
};

// Accumulates bytes and hands out complete lines (without '\n'). A line longer than
// `max_line` is handed out in pieces rather than held without bound.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line = 64 * 1024) : max_line_(max_line) {}
  void feed(std::string_view data, const std::function<void(std::string_view)>& on_line);
  // Hands out what is left (a last line without '\n').
  void finish(const std::function<void(std::string_view)>& on_line);

 private:
  size_t max_line_;
  std::string partial_;
};

struct OutputRoute {
  int console_fd = -1;         // where console copies go (1 or 2), or -1 for none
  std::string prefix;          // prepended to console copies, e.g. "[default0]:"
  int file_fd = -1;            // log file, owned by the pump
  TailBuffer* tail = nullptr;  // must outlive the pump
};

// Reads one pipe until EOF. Owns the descriptor and the log file.
class StreamPump : public std::enable_shared_from_this<StreamPump> {
 public:
  StreamPump(asio::io_context& io, int fd, OutputRoute route, std::function<void()> on_eof);
  ~StreamPump();
  void start();

 private:
  void read();
  void emit(std::string_view line);

  asio::posix::stream_descriptor pipe_;
  OutputRoute route_;
  std::function<void()> on_eof_;
  LineSplitter splitter_;
  std::string out_;  // assembly buffer for one line
  char buf_[16384];
};

// write(2) all of `data`, retrying on EINTR and short writes; errors are dropped (a closed
// console must not stop the job).
void write_fully(int fd, std::string_view data);

}  // namespace cohort::launch
