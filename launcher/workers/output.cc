#include "workers/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/error.h"
#include "loop/console.h"

namespace cohort::launch {

void TailBuffer::push(std::string_view line) {
  // After a fatal signal's stack, Python's faulthandler (3.11+) lists every extension module
  // loaded: a line of kilobytes that would crowd the stack out of the tail and says nothing
  // about the failure.
  if (line.starts_with("Extension modules: ") && line.find(" (total: ") != std::string_view::npos)
    return;
  lines_.emplace_back(line.substr(0, max_bytes_));
  bytes_ += lines_.back().size();
  while (lines_.size() > max_lines_ || (bytes_ > max_bytes_ && lines_.size() > 1)) {
    bytes_ -= lines_.front().size();
    lines_.pop_front();
  }
}

std::string TailBuffer::text() const {
  std::string s;
  for (const auto& l : lines_) {
    if (!s.empty()) s.push_back('\n');
    s += l;
  }
  return s;
}

void LineSplitter::feed(std::string_view data,
                        const std::function<void(std::string_view)>& on_line) {
  while (!data.empty()) {
    auto nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(data);
      while (partial_.size() >= max_line_) {
        on_line(std::string_view(partial_).substr(0, max_line_));
        partial_.erase(0, max_line_);
      }
      return;
    }
    if (partial_.empty()) {
      on_line(data.substr(0, nl));
    } else {
      partial_.append(data.substr(0, nl));
      on_line(partial_);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LineSplitter::finish(const std::function<void(std::string_view)>& on_line) {
  if (!partial_.empty()) on_line(partial_);
  partial_.clear();
}

std::string_view last_redraw(std::string_view line) {
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  auto cr = line.rfind('\r');
  return cr == std::string_view::npos ? line : line.substr(cr + 1);
}

void write_fully(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

FilteredLog::FilteredLog(const std::string& path, std::vector<std::string> needles)
    : needles_(std::move(needles)) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  if (fd_ < 0) {
    int e = errno;
    throw IoError("cannot create " + path + ": " + std::strerror(e), e);
  }
}

FilteredLog::~FilteredLog() {
  if (fd_ >= 0) ::close(fd_);
}

void FilteredLog::offer(std::string_view prefix, std::string_view line) {
  for (const auto& n : needles_) {
    if (line.find(n) == std::string_view::npos) continue;
    std::string out;
    out.reserve(prefix.size() + line.size() + 1);
    out.append(prefix).append(line).push_back('\n');
    write_fully(fd_, out);
    return;
  }
}

std::shared_ptr<StreamPump> StreamPump::start(asio::io_context& io, int fd, PumpRoute route,
                                              std::function<void()> on_eof) {
  auto pump = std::make_shared<StreamPump>(io, fd, std::move(route), std::move(on_eof));
  pump->read();
  return pump;
}

StreamPump::StreamPump(asio::io_context& io, int fd, PumpRoute route, std::function<void()> on_eof)
    : pipe_(io, fd), route_(std::move(route)), on_eof_(std::move(on_eof)) {}

StreamPump::~StreamPump() {
  if (route_.file_fd >= 0) ::close(route_.file_fd);
}

void StreamPump::stop() {
  stopped_ = true;
  on_eof_ = nullptr;
  route_.console = nullptr;
  std::error_code ignored;
  pipe_.close(ignored);
}

void StreamPump::read() {
  pipe_.async_read_some(
      asio::buffer(buf_), [self = shared_from_this()](std::error_code ec, size_t n) {
        if (self->stopped_) return;
        if (n > 0) self->deliver(std::string_view(self->buf_, n));
        if (ec) {
          // EOF, or EIO once a pseudo-terminal's slave side has closed.
          self->splitter_.finish([&](std::string_view line) { self->on_line(line); });
          self->eof_ = true;
          std::error_code ignored;
          self->pipe_.close(ignored);
          if (auto done = std::move(self->on_eof_)) done();
          return;
        }
        self->read();
      });
}

void StreamPump::on_line(std::string_view line) {
  if (route_.keep_tail) tail_.push(last_redraw(line));
  if (route_.filtered) route_.filtered->offer(route_.filtered_prefix, line);
}

void StreamPump::deliver(std::string_view bytes) {
  if (route_.keep_tail || route_.filtered) {
    splitter_.feed(bytes, [&](std::string_view line) { on_line(line); });
  }
  if (route_.file_fd >= 0) write_fully(route_.file_fd, bytes);
  if (route_.console != nullptr) to_console(bytes);
}

void StreamPump::to_console(std::string_view bytes) {
  if (route_.prefix.empty()) {
    route_.console->write(bytes);
    return;
  }
  out_.clear();
  while (!bytes.empty()) {
    if (at_line_start_) out_.append(route_.prefix);
    size_t end = bytes.find_first_of("\n\r");
    if (end == std::string_view::npos) {
      out_.append(bytes);
      at_line_start_ = false;
      break;
    }
    if (bytes[end] == '\r' && end + 1 < bytes.size() && bytes[end + 1] == '\n') ++end;
    out_.append(bytes.substr(0, end + 1));
    bytes.remove_prefix(end + 1);
    at_line_start_ = true;
  }
  route_.console->write(out_);
}

}  // namespace cohort::launch
