#include "output.h"

#include <unistd.h>

#include <cerrno>

namespace cohort::launch {

void TailBuffer::push(std::string_view line) {
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

StreamPump::StreamPump(asio::io_context& io, int fd, OutputRoute route,
                       std::function<void()> on_eof)
    : pipe_(io, fd), route_(std::move(route)), on_eof_(std::move(on_eof)) {}

StreamPump::~StreamPump() {
  if (route_.file_fd >= 0) ::close(route_.file_fd);
}

void StreamPump::start() {
  read();
}

void StreamPump::read() {
  pipe_.async_read_some(asio::buffer(buf_),
                        [self = shared_from_this()](std::error_code ec, size_t n) {
                          auto on_line = [&](std::string_view line) { self->emit(line); };
                          if (n > 0) self->splitter_.feed(std::string_view(self->buf_, n), on_line);
                          if (ec) {
                            self->splitter_.finish(on_line);
                            std::error_code ignored;
                            self->pipe_.close(ignored);
                            if (self->on_eof_) self->on_eof_();
                            return;
                          }
                          self->read();
                        });
}

void StreamPump::emit(std::string_view line) {
  if (route_.tail != nullptr) route_.tail->push(line);
  if (route_.file_fd >= 0) {
    out_.assign(line);
    out_.push_back('\n');
    write_fully(route_.file_fd, out_);
  }
  if (route_.console_fd >= 0) {
    out_.assign(route_.prefix);
    out_.append(line);
    out_.push_back('\n');
    write_fully(route_.console_fd, out_);
  }
}

}  // namespace cohort::launch
