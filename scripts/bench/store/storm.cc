#include "storm.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "wire.h"

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;
using rdzv::Dialect;

// Connected ranks send their ADD while later ranks are still connecting, as independent processes
// would: every this many connects the loop serves what is ready.
constexpr int kConnectBatch = 64;

enum class State : uint8_t { kConnecting, kHandshake, kAdding, kWaiting, kReleased };

const char* state_name(State s) {
  switch (s) {
    case State::kConnecting:
      return "connecting";
    case State::kHandshake:
      return "awaiting PING";
    case State::kAdding:
      return "awaiting ADD";
    case State::kWaiting:
      return "awaiting WAIT";
    case State::kReleased:
      return "released";
  }
  return "?";
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct Rank {
  int fd = -1;
  State state = State::kConnecting;
  uint8_t have = 0;
  std::array<char, 16> buf;  // replies here are at most 8 bytes
  Clock::time_point connect_started;
};

class Storm {
 public:
  Storm(const Endpoint& ep, int n, const StormConfig& cfg) : ep_(ep), n_(n), cfg_(cfg), ranks_(n) {
    std::string arrived = cfg.key_prefix + "/arrived", go = cfg.key_prefix + "/go";
    add_ = encode_add(cfg.dialect, arrived, 1);
    wait_ = encode_wait(cfg.dialect, go);
    set_wait_ = encode_set(cfg.dialect, go, "1") + wait_;
    nonce_ = static_cast<uint32_t>(::getpid());
    if (cfg.dialect == Dialect::kCurrent) handshake_ = encode_handshake(cfg.dialect, nonce_);
    result_.ranks = n;
  }
  ~Storm() {
    for (auto& r : ranks_) {
      if (r.fd >= 0) ::close(r.fd);
    }
  }
  Storm(const Storm&) = delete;
  Storm& operator=(const Storm&) = delete;

  StormResult run() {
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) return failed("epoll_create1: " + errno_text(errno));
    t0_ = Clock::now();
    deadline_ = t0_ + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(cfg_.timeout_s));
    for (int i = 0; i < n_ && error_.empty(); ++i) {
      open(i);
      if (i % kConnectBatch == kConnectBatch - 1) poll_once(0);
    }
    result_.issue_s = seconds(Clock::now() - t0_);
    while (error_.empty() && result_.released < n_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      if (left.count() <= 0) break;
      poll_once(static_cast<int>(std::min<int64_t>(left.count(), 100)));
    }
    if (!error_.empty()) return failed(error_);
    if (result_.connected == n_) result_.connect_s = seconds(last_connect_ - t0_);
    if (arrived_all_) result_.arrive_s = seconds(arrived_at_ - t0_);
    result_.max_connect_ms = max_connect_ms_;
    if (result_.released < n_) {
      result_.status = "timeout";
      char limit[32];
      std::snprintf(limit, sizeof(limit), "%g", cfg_.timeout_s);
      result_.error = std::string("after ") + limit + " s: " + progress();
      return result_;
    }
    result_.total_s = seconds(last_release_ - t0_);
    return result_;
  }

 private:
  std::string progress() const {
    return std::to_string(result_.connected) + " connected, " + std::to_string(result_.arrived) +
           " arrived, " + std::to_string(result_.released) + " released of " + std::to_string(n_);
  }

  StormResult failed(const std::string& why) {
    result_.status = "error";
    result_.error = why + " (" + progress() + ")";
    result_.max_connect_ms = max_connect_ms_;
    return result_;
  }

  void open(int i) {
    Rank& r = ranks_[i];
    r.fd = ::socket(ep_.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r.fd < 0) {
      error_ = "socket for rank " + std::to_string(i) + ": " + errno_text(errno);
      return;
    }
    set_nodelay(r.fd);
    // Edge-triggered: the connect completion and each reply arrive once, with no epoll_ctl
    // per state change.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
    ev.data.u32 = static_cast<uint32_t>(i);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, r.fd, &ev) != 0) {
      error_ = "epoll_ctl: " + errno_text(errno);
      return;
    }
    r.connect_started = Clock::now();
    if (::connect(r.fd, reinterpret_cast<const sockaddr*>(&ep_.addr), ep_.len) == 0) {
      on_connected(i);
    } else if (errno != EINPROGRESS) {
      error_ = "connect for rank " + std::to_string(i) + ": " + errno_text(errno);
    }
  }

  void poll_once(int timeout_ms) {
    int n = ::epoll_wait(epoll_.get(), events_.data(), events_.size(), timeout_ms);
    if (n < 0 && errno != EINTR) error_ = "epoll_wait: " + errno_text(errno);
    for (int k = 0; k < n && error_.empty(); ++k) {
      on_event(static_cast<int>(events_[k].data.u32), events_[k].events);
    }
  }

  void on_event(int i, uint32_t events) {
    Rank& r = ranks_[i];
    if (r.state == State::kConnecting) {
      if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        error_ = "connect for rank " + std::to_string(i) + ": " + errno_text(err);
        return;
      }
      on_connected(i);
      if (!error_.empty()) return;
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) read_all(i);
  }

  void on_connected(int i) {
    Rank& r = ranks_[i];
    auto now = Clock::now();
    ++result_.connected;
    last_connect_ = now;
    max_connect_ms_ =
        std::max(max_connect_ms_,
                 std::chrono::duration<double, std::milli>(now - r.connect_started).count());
    if (cfg_.dialect == Dialect::kCurrent) {
      r.state = State::kHandshake;
      send(i, handshake_);
    } else {
      r.state = State::kAdding;
      send(i, add_);
    }
  }

  // Edge-triggered, so read until the socket is empty.
  void read_all(int i) {
    Rank& r = ranks_[i];
    for (;;) {
      ssize_t got = ::recv(r.fd, r.buf.data() + r.have, r.buf.size() - r.have, 0);
      if (got == 0) {
        error_ = "the server closed rank " + std::to_string(i) + "'s connection while " +
                 state_name(r.state);
        return;
      }
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        error_ = "recv for rank " + std::to_string(i) + ": " + errno_text(errno);
        return;
      }
      r.have = static_cast<uint8_t>(r.have + got);
      while (error_.empty() && r.have > 0) {
        std::optional<rdzv::Op> op = awaited(r.state);
        if (!op) {
          error_ =
              "unexpected bytes for rank " + std::to_string(i) + " while " + state_name(r.state);
          return;
        }
        rdzv::Reply reply;  // fixed fields only: nothing allocated
        rdzv::DecodeResult d = rdzv::decode_reply(
            *op, 1, {reinterpret_cast<const uint8_t*>(r.buf.data()), r.have}, &reply);
        if (d.status != rdzv::DecodeStatus::kComplete) break;
        const size_t size = d.consumed;
        on_reply(i, reply);
        std::memmove(r.buf.data(), r.buf.data() + size, r.have - size);
        r.have = static_cast<uint8_t>(r.have - size);
      }
      if (!error_.empty()) return;
    }
  }

  // The request whose reply a rank in state `s` waits for; nullopt when none.
  static std::optional<rdzv::Op> awaited(State s) {
    switch (s) {
      case State::kHandshake:
        return rdzv::Op::kPing;
      case State::kAdding:
        return rdzv::Op::kAdd;
      case State::kWaiting:
        return rdzv::Op::kWait;
      default:
        return std::nullopt;
    }
  }

  void on_reply(int i, const rdzv::Reply& reply) {
    Rank& r = ranks_[i];
    switch (r.state) {
      case State::kHandshake:
        if (reply.u32 != nonce_) {
          error_ = "PING echoed a different nonce";
          return;
        }
        r.state = State::kAdding;
        send(i, add_);
        return;
      case State::kAdding: {
        int64_t v = reply.number;
        ++result_.arrived;
        if (v > n_ || v < 1) {
          error_ = "ADD returned " + std::to_string(v) + " (counter not fresh?)";
          return;
        }
        r.state = State::kWaiting;
        if (v == n_) {
          arrived_all_ = true;
          arrived_at_ = Clock::now();
          send(i, set_wait_);
        } else {
          send(i, wait_);
        }
        return;
      }
      case State::kWaiting:
        if (reply.code != rdzv::kStopWaiting) {
          error_ = "WAIT answered " + std::to_string(static_cast<int>(reply.code));
          return;
        }
        r.state = State::kReleased;
        ++result_.released;
        last_release_ = Clock::now();
        return;
      default:
        return;
    }
  }

  void send(int i, const std::string& bytes) {
    // A fresh connection has an empty send buffer; a short write would leave a partial request,
    // which a 1.13 server must never see, so it is an error here.
    ssize_t n = ::send(ranks_[i].fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(bytes.size())) {
      error_ = "send for rank " + std::to_string(i) + ": " +
               (n < 0 ? errno_text(errno) : std::string("short write"));
    }
  }

  const Endpoint& ep_;
  const int n_;
  const StormConfig& cfg_;
  std::vector<Rank> ranks_;
  Fd epoll_;
  std::array<epoll_event, 1024> events_;
  std::string add_, wait_, set_wait_, handshake_;
  uint32_t nonce_ = 0;
  Clock::time_point t0_, deadline_, last_connect_, arrived_at_, last_release_;
  bool arrived_all_ = false;
  double max_connect_ms_ = 0;
  std::string error_;
  StormResult result_;
};

}  // namespace

StormResult run_storm(const Endpoint& ep, int ranks, const StormConfig& config) {
  Storm storm(ep, ranks, config);
  return storm.run();
}

}  // namespace cohort::bench
