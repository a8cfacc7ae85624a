#include "session.h"

#include <spdlog/spdlog.h>

#include <asio/post.hpp>
#include <asio/write.hpp>
#include <cstring>

namespace cohort::rdzv {
namespace {

constexpr size_t kInitialBuffer = 16 * 1024;
constexpr size_t kMinReadSpace = 4 * 1024;
// Stop reading a client that does not read its replies once this much output is queued.
constexpr size_t kMaxQueuedOutput = 64ull << 20;

}  // namespace

Session::Session(SessionHost& host, asio::ip::tcp::socket socket, SessionId id, std::string peer)
    : host_(host), socket_(std::move(socket)), id_(id), peer_(std::move(peer)) {
  in_.resize(kInitialBuffer);
}

void Session::start() { do_read(); }

void Session::stop() {
  if (closed_) return;
  closed_ = true;
  std::error_code ignored;
  socket_.close(ignored);
}

bool Session::backlogged() const {
  return out_.size() + writing_.size() > kMaxQueuedOutput ||
         end_ - begin_ > host_.options().max_request_bytes;
}

void Session::do_read() {
  if (closed_ || read_in_flight_ || backlogged()) return;
  if (in_.size() - end_ < kMinReadSpace) {
    // Move the unconsumed tail to the front, and grow when that is not enough.
    if (begin_ > 0) {
      std::memmove(in_.data(), in_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (in_.size() - end_ < kMinReadSpace) in_.resize(in_.size() * 2);
  }
  read_in_flight_ = true;
  socket_.async_read_some(asio::buffer(in_.data() + end_, in_.size() - end_),
                          [self = shared_from_this()](std::error_code ec, size_t n) {
                            self->on_read(ec, n);
                          });
}

void Session::on_read(std::error_code ec, size_t n) {
  read_in_flight_ = false;
  if (closed_) return;
  if (ec) {
    if (ec == asio::error::eof || ec == asio::error::connection_reset) {
      close({}, false);
    } else {
      close("read failed: " + ec.message(), false);
    }
    return;
  }
  end_ += n;
  process();
  do_read();
}

void Session::process() {
  process_posted_ = false;
  const StoreServerOptions& opts = host_.options();
  while (!closed_ && begin_ < end_) {
    std::span<const uint8_t> pending(in_.data() + begin_, end_ - begin_);
    if (!dialect_known_) {
      DetectStatus d = detect_dialect(pending);
      if (d == DetectStatus::kNeedMore) break;
      dialect_ = d == DetectStatus::kCurrent ? Dialect::kCurrent : Dialect::kLegacy;
      dialect_known_ = true;
    }
    if (waiting_) {
      auto op = op_from_wire(dialect_, pending[0]);
      if (!op || *op != Op::kCancelWait) break;  // held until the wait ends
    }
    if (out_.size() > kMaxQueuedOutput) break;  // resumes when the client reads its replies
    DecodeResult res = decode_request(dialect_, pending, opts.limits, &req_);
    if (res.status == DecodeStatus::kNeedMore) {
      if (pending.size() > opts.max_request_bytes) {
        close("request of more than " + std::to_string(opts.max_request_bytes) +
                  " bytes exceeds --max-request-bytes",
              true);
        return;
      }
      break;
    }
    if (res.status == DecodeStatus::kBad) {
      close(res.error, true);
      return;
    }
    std::string why;
    bool keep = dispatch(req_, &why);
    begin_ += res.consumed;
    if (!keep) {
      close(why, true);
      return;
    }
  }
  if (begin_ == end_) begin_ = end_ = 0;
  flush();
}

bool Session::dispatch(const Request& req, std::string* why) {
  StoreState& st = host_.state();
  switch (req.op) {
    case Op::kValidate:
      if (req.u32 != kValidationMagic) {
        *why = "VALIDATE with a wrong magic number";
        return false;
      }
      return true;
    case Op::kPing:
      put_u32(&out_, req.u32);
      return true;
    case Op::kSet:
      st.set(req.keys[0], req.values[0]);
      return true;
    case Op::kCompareSet:
      put_bytes(&out_, st.compare_set(req.keys[0], req.values[0], req.values[1]));
      return true;
    case Op::kGet: {
      const std::string* v = st.get(req.keys[0]);
      if (v == nullptr) {
        // The 1.13 daemon throws and drops the connection; the libuv daemon answers empty.
        if (dialect_ == Dialect::kLegacy) {
          *why = "GET of a missing key";
          return false;
        }
        put_bytes(&out_, {});
      } else {
        put_bytes(&out_, *v);
      }
      return true;
    }
    case Op::kAdd: {
      int64_t sum;
      if (!st.add(req.keys[0], req.delta, &sum)) {
        *why = "ADD on a key whose value is not a decimal integer";
        return false;
      }
      put_i64(&out_, sum);
      return true;
    }
    case Op::kCheck:
      put_u8(&out_, st.check(req.keys) ? kCheckReady : kCheckNotReady);
      return true;
    case Op::kWait:
      switch (st.wait(id_, req.keys)) {
        case StoreState::WaitResult::kReady:
          put_u8(&out_, kStopWaiting);
          return true;
        case StoreState::WaitResult::kParked:
          waiting_ = true;
          return true;
        case StoreState::WaitResult::kTooManyWaiters:
          *why = "parked waits exceed --max-waiters (" +
                 std::to_string(host_.options().max_waiters) + ")";
          return false;
      }
      return true;
    case Op::kCancelWait:
      st.cancel_wait(id_);
      waiting_ = false;
      put_u8(&out_, kWaitCanceled);
      return true;
    case Op::kGetNumKeys:
      put_i64(&out_, st.num_keys());
      return true;
    case Op::kWatchKey:
      st.watch(id_, req.keys[0]);
      put_u8(&out_, kWatchRegistered);
      return true;
    case Op::kDeleteKey:
      put_i64(&out_, st.delete_key(req.keys[0]) ? 1 : 0);
      return true;
    case Op::kAppend:
      st.append(req.keys[0], req.values[0]);
      return true;
    case Op::kMultiGet:
      for (auto k : req.keys) {
        const std::string* v = st.get(k);
        if (v == nullptr && dialect_ == Dialect::kLegacy) {
          *why = "MULTI_GET of a missing key";
          return false;
        }
        put_bytes(&out_, v ? std::string_view(*v) : std::string_view());
      }
      return true;
    case Op::kMultiSet:
      for (size_t i = 0; i < req.keys.size(); ++i) st.set(req.keys[i], req.values[i]);
      return true;
    case Op::kQueuePush:
      st.queue_push(req.keys[0], req.values[0]);
      return true;
    case Op::kQueuePop: {
      std::string value;
      int64_t len = st.queue_pop(req.keys[0], &value);
      put_i64(&out_, len);
      if (len > 0) put_bytes(&out_, value);
      return true;
    }
    case Op::kQueueLen:
      put_i64(&out_, st.queue_len(req.keys[0]));
      return true;
  }
  *why = "unhandled command";
  return false;
}

void Session::wake() {
  if (closed_ || !waiting_) return;
  waiting_ = false;
  put_u8(&out_, kStopWaiting);
  flush();
  // Requests that arrived during the wait run on a later turn of the loop, never inside the
  // write that woke us.
  if (!process_posted_ && begin_ < end_) {
    process_posted_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->process();
      self->do_read();
    });
  }
}

void Session::deliver(std::string_view bytes) {
  if (closed_) return;
  out_.append(bytes);
  flush();
}

void Session::flush() {
  if (closed_ || write_in_flight_ || out_.empty()) return;
  writing_.swap(out_);
  out_.clear();
  write_in_flight_ = true;
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](std::error_code ec, size_t) {
                      self->write_in_flight_ = false;
                      self->writing_.clear();
                      if (self->closed_) return;
                      if (ec) {
                        self->close({}, false);
                        return;
                      }
                      self->flush();
                      // Output drained: buffered requests and reads may resume.
                      if (self->begin_ < self->end_ && !self->waiting_) self->process();
                      self->do_read();
                    });
}

void Session::close(const std::string& reason, bool for_limit) {
  if (closed_) return;
  if (!reason.empty()) host_.log().warn("closing connection from {}: {}", peer_, reason);
  closed_ = true;
  std::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  host_.on_session_closed(id_, for_limit);
}

}  // namespace cohort::rdzv
