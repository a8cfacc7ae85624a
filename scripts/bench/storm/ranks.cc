#include "ranks.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

#include "../store/net.h"
#include "../store/wire.h"

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;
using rdzv::Dialect;

// Connected ranks speak while later ones still connect, as independent processes would.
constexpr int kConnectBatch = 64;

enum class State : uint8_t { kConnecting, kHandshake, kAdding, kWaiting, kReleased };

struct Rank {
  int fd = -1;
  State state = State::kConnecting;
  uint8_t have = 0;
  std::array<char, 16> buf;  // replies here are at most 8 bytes
  Clock::time_point connect_started;
};

class Ranks {
 public:
  Ranks(const std::vector<RankTarget>& targets, const RanksConfig& cfg)
      : targets_(targets), cfg_(cfg), ranks_(targets.size()) {
    add_ = encode_add(cfg.dialect, cfg.key_prefix + "/arrived", 1);
    wait_ = encode_wait(cfg.dialect, cfg.key_prefix + "/go");
    set_wait_ = encode_set(cfg.dialect, cfg.key_prefix + "/go", "1") + wait_;
    nonce_ = static_cast<uint32_t>(::getpid());
    if (cfg.dialect == Dialect::kCurrent) handshake_ = encode_handshake(cfg.dialect, nonce_);
  }
  ~Ranks() {
    for (auto& r : ranks_)
      if (r.fd >= 0) ::close(r.fd);
  }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  RanksResult run() {
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) return failed("epoll_create1: " + errno_text(errno));
    const int n = static_cast<int>(ranks_.size());
    for (int i = 0; i < n && error_.empty(); ++i) {
      open(i);
      if (i % kConnectBatch == kConnectBatch - 1) poll_once(0);
    }
    while (error_.empty() && result_.released < n) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.deadline - Clock::now());
      if (left.count() <= 0) break;
      poll_once(static_cast<int>(std::min<int64_t>(left.count(), 100)));
    }
    if (!error_.empty()) return failed(error_);
    if (result_.released < n) return failed("deadline passed");
    return result_;
  }
  // The connections stay open (the store's connection count is read meanwhile) until destroyed.

 private:
  RanksResult failed(const std::string& why) {
    result_.error = why + " (" + std::to_string(result_.connected) + " connected, " +
                    std::to_string(result_.released) + " released of " +
                    std::to_string(ranks_.size()) + " here)";
    return result_;
  }

  void open(int i) {
    Rank& r = ranks_[i];
    const RankTarget& t = targets_[i];
    r.fd = ::socket(t.dial.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r.fd < 0) {
      error_ = "socket: " + errno_text(errno);
      return;
    }
    set_nodelay(r.fd);
    if (t.source.ss_family != AF_UNSPEC) {
      // The port is chosen at connect, per destination: thousands of ranks of one simulated node
      // then never search the port range (IP_BIND_ADDRESS_NO_PORT).
      int one = 1;
      ::setsockopt(r.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
      if (::bind(r.fd, reinterpret_cast<const sockaddr*>(&t.source), t.source_len) != 0) {
        error_ = "bind: " + errno_text(errno);
        return;
      }
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
    ev.data.u32 = static_cast<uint32_t>(i);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, r.fd, &ev) != 0) {
      error_ = "epoll_ctl: " + errno_text(errno);
      return;
    }
    r.connect_started = Clock::now();
    if (::connect(r.fd, reinterpret_cast<const sockaddr*>(&t.dial), t.dial_len) == 0) {
      on_connected(i);
    } else if (errno != EINPROGRESS) {
      error_ = "connect: " + errno_text(errno);
    }
  }

  void poll_once(int timeout_ms) {
    int n = ::epoll_wait(epoll_.get(), events_.data(), events_.size(), timeout_ms);
    if (n < 0 && errno != EINTR) error_ = "epoll_wait: " + errno_text(errno);
    for (int k = 0; k < n && error_.empty(); ++k)
      on_event(static_cast<int>(events_[k].data.u32), events_[k].events);
  }

  void on_event(int i, uint32_t events) {
    Rank& r = ranks_[i];
    if (r.state == State::kConnecting) {
      if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        error_ = "connect: " + errno_text(err);
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
    if (++result_.connected == static_cast<int>(ranks_.size())) result_.all_connected = now;
    result_.max_connect_ms =
        std::max(result_.max_connect_ms,
                 std::chrono::duration<double, std::milli>(now - r.connect_started).count());
    if (cfg_.dialect == Dialect::kCurrent) {
      r.state = State::kHandshake;
      send(i, handshake_);
    } else {
      r.state = State::kAdding;
      send(i, add_);
    }
  }

  void read_all(int i) {
    Rank& r = ranks_[i];
    for (;;) {
      ssize_t got = ::recv(r.fd, r.buf.data() + r.have, r.buf.size() - r.have, 0);
      if (got == 0) {
        error_ = "the server closed a rank's connection";
        return;
      }
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        error_ = "recv: " + errno_text(errno);
        return;
      }
      r.have = static_cast<uint8_t>(r.have + got);
      while (error_.empty() && r.have > 0) {
        std::optional<rdzv::Op> op = awaited(r.state);
        if (!op) {
          error_ = "unexpected bytes";
          return;
        }
        rdzv::Reply reply;
        rdzv::DecodeResult d = rdzv::decode_reply(
            *op, 1, {reinterpret_cast<const uint8_t*>(r.buf.data()), r.have}, &reply);
        if (d.status != rdzv::DecodeStatus::kComplete) break;
        on_reply(i, reply);
        std::memmove(r.buf.data(), r.buf.data() + d.consumed, r.have - d.consumed);
        r.have = static_cast<uint8_t>(r.have - d.consumed);
      }
      if (!error_.empty()) return;
    }
  }

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
        const int64_t v = reply.number;
        if (v > cfg_.job_ranks || v < 1) {
          error_ = "ADD returned " + std::to_string(v) + " (counter not fresh?)";
          return;
        }
        r.state = State::kWaiting;
        send(i, v == cfg_.job_ranks ? set_wait_ : wait_);
        return;
      }
      case State::kWaiting:
        if (reply.code != rdzv::kStopWaiting) {
          error_ = "WAIT answered " + std::to_string(static_cast<int>(reply.code));
          return;
        }
        r.state = State::kReleased;
        ++result_.released;
        result_.last_released = Clock::now();
        return;
      default:
        return;
    }
  }

  void send(int i, const std::string& bytes) {
    ssize_t n = ::send(ranks_[i].fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(bytes.size()))
      error_ = "send: " + (n < 0 ? errno_text(errno) : std::string("short write"));
  }

  const std::vector<RankTarget>& targets_;
  const RanksConfig& cfg_;
  std::vector<Rank> ranks_;
  Fd epoll_;
  std::array<epoll_event, 1024> events_;
  std::string add_, wait_, set_wait_, handshake_;
  uint32_t nonce_ = 0;
  std::string error_;
  RanksResult result_;
};

}  // namespace

RanksResult run_ranks(const std::vector<RankTarget>& ranks, const RanksConfig& config,
                      const std::function<void(const RanksResult&)>& while_open) {
  Ranks r(ranks, config);
  RanksResult result = r.run();
  while_open(result);
  return result;
}

}  // namespace cohort::bench
