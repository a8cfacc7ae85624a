// Workers' output: a pump per piped stream, read on the event loop and routed to the console
// (ConsoleStream, console.h: raw, or with torchrun's "[default0]:" prefix at the start of each
// line), to the worker's log file under --log-dir, and into a tail kept for the failure summary.
//
// Bytes reach the console as they arrive: a partial line (a prompt, a progress bar that redraws
// with '\r') is not held back for its newline. With a prefix, each line (and each '\r' redraw)
// starts with it.
#pragma once

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::launch {

class ConsoleStream;

// The last lines of a stream (at most `max_lines`, and about `max_bytes`), without the list of
// extension modules that Python's faulthandler prints after a fatal signal's stack.
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

// What a terminal would show of a line that redraws itself with '\r': the text after the last
// '\r' (a trailing '\r' ignored).
std::string_view last_redraw(std::string_view line);

// A file that collects, from every worker of an attempt, the lines matching any of `needles`
// (--duplicate-stdout-filters / --duplicate-stderr-filters: <attempt>/filtered_stdout.log), each
// whole and with its worker's console prefix.
class FilteredLog {
 public:
  // Creates `path`; throws IoError when it cannot.
  FilteredLog(const std::string& path, std::vector<std::string> needles);
  ~FilteredLog();
  FilteredLog(const FilteredLog&) = delete;
  FilteredLog& operator=(const FilteredLog&) = delete;
  // Writes "<prefix><line>\n" when the line contains a needle.
  void offer(std::string_view prefix, std::string_view line);

 private:
  int fd_ = -1;
  std::vector<std::string> needles_;
};

struct PumpRoute {
  ConsoleStream* console = nullptr;       // must outlive the pump; null: not on the console
  std::string prefix;                     // console copies start each line with it ("": raw)
  int file_fd = -1;                       // log file (every byte), owned by the pump
  bool keep_tail = false;                 // keep the last lines for the failure summary
  std::shared_ptr<FilteredLog> filtered;  // lines matching its needles also go there
  std::string filtered_prefix;            // the prefix of those lines
};

// Reads one pipe or pseudo-terminal until EOF. Owns the descriptor and the log file, and its
// tail, so that nothing it touches can go away under a pending read: the owner calls stop()
// (the worker's group ended, or it restarts) and the pump then never calls back again.
class StreamPump : public std::enable_shared_from_this<StreamPump> {
 public:
  // Starts reading `fd`; `on_eof` runs once, on the loop, when the stream ends (EOF, or EIO on a
  // pseudo-terminal whose slave side closed).
  static std::shared_ptr<StreamPump> start(asio::io_context& io, int fd, PumpRoute route,
                                           std::function<void()> on_eof);
  StreamPump(asio::io_context& io, int fd, PumpRoute route, std::function<void()> on_eof);
  ~StreamPump();

  // Closes the stream without waiting for its end; on_eof does not run.
  void stop();
  bool at_eof() const { return eof_; }
  const TailBuffer& tail() const { return tail_; }

 private:
  void read();
  void deliver(std::string_view bytes);
  void on_line(std::string_view line);
  void to_console(std::string_view bytes);

  asio::posix::stream_descriptor pipe_;
  PumpRoute route_;
  std::function<void()> on_eof_;
  LineSplitter splitter_;
  TailBuffer tail_;
  bool at_line_start_ = true;  // the console copy's next byte starts a line
  bool eof_ = false;
  bool stopped_ = false;
  std::string out_;  // assembly buffer for prefixed console copies
  char buf_[16384];
};

// write(2) all of `data`, retrying on EINTR and short writes; errors are dropped.
void write_fully(int fd, std::string_view data);

}  // namespace cohort::launch
