#include "load.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <exception>
#include <thread>
#include <vector>

#include "cohort/error.h"
#include "stats.h"
#include "wire.h"

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;
using rdzv::Dialect;

constexpr auto kConnectTimeout = std::chrono::seconds(10);
// After the window, replies still owed must arrive within this.
constexpr auto kDrainTimeout = std::chrono::seconds(10);

// The cycle: SET+WAIT (one write, WAIT's byte answers both), GET, ADD.
constexpr int kSteps = 3;
constexpr std::array<rdzv::Op, kSteps> kReplyTo = {rdzv::Op::kWait, rdzv::Op::kGet, rdzv::Op::kAdd};
constexpr std::array<uint32_t, kSteps> kRequestsPerStep = {2, 1, 1};

struct Client {
  Fd fd;
  std::array<std::string, kSteps> wire;  // pre-encoded, so the loop never allocates
  int step = 0;
  bool busy = false;  // a request is outstanding
  Clock::time_point sent;
  std::vector<char> buf;
  size_t have = 0;
  rdzv::Reply reply;  // decoded from buf
};

struct Window {
  Clock::time_point begin, end;
};

struct ThreadResult {
  std::string error;
  uint64_t requests = 0;
  uint64_t cycles = 0;
  LatencyHistogram latency;
};

bool send_step(Client& c, Clock::time_point now, std::string* error) {
  const std::string& w = c.wire[c.step];
  ssize_t n = ::send(c.fd.get(), w.data(), w.size(), MSG_NOSIGNAL);
  // One request outstanding and a few dozen bytes: the socket buffer is empty, so a short write
  // would mean something is badly wrong. A partial request must never reach a 1.13 server (it
  // would block its only thread), so this is an error rather than a retry.
  if (n != static_cast<ssize_t>(w.size())) {
    *error = n < 0 ? "send: " + errno_text(errno) : "short write to the server";
    return false;
  }
  c.sent = now;
  c.busy = true;
  return true;
}

// Checks a complete reply for the current step: nullptr when it is what the protocol promises,
// else what is wrong.
const char* check_reply(const Client& c, size_t value_bytes) {
  switch (c.step) {
    case 0:
      return c.reply.code == rdzv::kStopWaiting ? nullptr : "WAIT answered not 0";
    case 1:
      return c.reply.values[0].size() == value_bytes ? nullptr
                                                     : "GET returned a value of the wrong size";
    default:
      return c.reply.number > 0 ? nullptr : "ADD returned a non-positive counter";
  }
}

// Reads what arrived for `c` and, when its reply is complete, records it and sends the next
// request (until the window closes). Returns false with *error set on failure.
bool on_readable(Client& c, const Window& w, size_t value_bytes, ThreadResult* out,
                 size_t* outstanding) {
  ssize_t r = ::recv(c.fd.get(), c.buf.data() + c.have, c.buf.size() - c.have, 0);
  if (r == 0) {
    out->error = "the server closed a connection";
    return false;
  }
  if (r < 0) {
    if (errno == EAGAIN || errno == EINTR) return true;
    out->error = "recv: " + errno_text(errno);
    return false;
  }
  c.have += static_cast<size_t>(r);
  rdzv::DecodeResult d = rdzv::decode_reply(
      kReplyTo[c.step], 1, {reinterpret_cast<const uint8_t*>(c.buf.data()), c.have}, &c.reply);
  if (d.status == rdzv::DecodeStatus::kBad) {
    out->error = "an unreadable reply: " + d.error;
    return false;
  }
  const size_t size = d.consumed;
  if (d.status == rdzv::DecodeStatus::kNeedMore) {
    if (c.have == c.buf.size()) {
      out->error = "a reply larger than any the benchmark expects";
      return false;
    }
    return true;
  }
  if (!c.busy || size != c.have) {
    out->error = "bytes the benchmark did not ask for";
    return false;
  }
  if (const char* bad = check_reply(c, value_bytes)) {
    out->error = bad;
    return false;
  }
  auto now = Clock::now();
  if (now >= w.begin && now < w.end) {
    out->requests += kRequestsPerStep[c.step];
    if (c.step == kSteps - 1) ++out->cycles;
    out->latency.record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - c.sent).count()));
  }
  c.have = 0;
  c.busy = false;
  c.step = (c.step + 1) % kSteps;
  if (now < w.end) return send_step(c, now, &out->error);
  --*outstanding;
  return true;
}

void drive(std::vector<Client>* clients, Window w, size_t value_bytes, ThreadResult* out) {
  Fd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) {
    out->error = "epoll_create1: " + errno_text(errno);
    return;
  }
  for (uint32_t i = 0; i < clients->size(); ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = i;
    if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, (*clients)[i].fd.get(), &ev) != 0) {
      out->error = "epoll_ctl: " + errno_text(errno);
      return;
    }
  }
  auto start = Clock::now();
  for (auto& c : *clients) {
    if (!send_step(c, start, &out->error)) return;
  }
  size_t outstanding = clients->size();
  std::array<epoll_event, 64> events;
  while (outstanding > 0) {
    int n = ::epoll_wait(ep.get(), events.data(), events.size(), 100);
    if (n < 0 && errno != EINTR) {
      out->error = "epoll_wait: " + errno_text(errno);
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (!on_readable((*clients)[events[i].data.u32], w, value_bytes, out, &outstanding)) return;
    }
    if (n <= 0 && Clock::now() > w.end + kDrainTimeout) {
      out->error = std::to_string(outstanding) + " replies missing " +
                   std::to_string(kDrainTimeout.count()) + " s after the window closed";
      return;
    }
  }
}

// Connects client i and pre-encodes its requests.
Client make_client(const Endpoint& ep, int i, KeyMode mode, const OpsConfig& cfg) {
  Client c;
  c.fd = connect_blocking(ep, kConnectTimeout);
  if (cfg.dialect == Dialect::kCurrent) {
    auto nonce = static_cast<uint32_t>(::getpid()) ^ static_cast<uint32_t>(i);
    send_all(c.fd.get(), encode_handshake(cfg.dialect, nonce), kConnectTimeout, "VALIDATE+PING");
    std::string echo = recv_exact(c.fd.get(), 4, kConnectTimeout, "PING");
    rdzv::decode_reply(rdzv::Op::kPing, 0, {reinterpret_cast<const uint8_t*>(echo.data()), 4},
                       &c.reply);
    if (c.reply.u32 != nonce) throw Error("PING echoed a different nonce");
  }
  set_nonblocking(c.fd.get());
  std::string base = cfg.key_prefix;
  if (mode == KeyMode::kDistinct) base += "/c" + std::to_string(i);
  std::string value_key = base + "/v", counter_key = base + "/n";
  std::string value(cfg.value_bytes, static_cast<char>('a' + i % 26));
  c.wire[0] = encode_set(cfg.dialect, value_key, value) + encode_wait(cfg.dialect, value_key);
  c.wire[1] = encode_get(cfg.dialect, value_key);
  c.wire[2] = encode_add(cfg.dialect, counter_key, 1);
  c.buf.resize(8 + cfg.value_bytes + 8);
  return c;
}

}  // namespace

const char* key_mode_name(KeyMode m) {
  return m == KeyMode::kDistinct ? "distinct" : "shared";
}

OpsResult run_ops(const Endpoint& ep, int clients, KeyMode mode, const OpsConfig& cfg) {
  OpsResult result;
  int threads = std::max(1, std::min(cfg.threads, clients));
  std::vector<std::vector<Client>> per_thread(threads);
  try {
    for (int i = 0; i < clients; ++i) {
      per_thread[i % threads].push_back(make_client(ep, i, mode, cfg));
    }
  } catch (const std::exception& e) {
    result.error = e.what();
    return result;
  }

  auto to_dur = [](double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  Window w;
  w.begin = Clock::now() + to_dur(cfg.warmup_s);
  w.end = w.begin + to_dur(cfg.duration_s);
  std::vector<ThreadResult> partial(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back(drive, &per_thread[t], w, cfg.value_bytes, &partial[t]);
  }
  // CPU time over the counted window only (the warm-up and the drain are left out).
  std::this_thread::sleep_until(w.begin);
  const CpuSeconds server0 = cfg.server_pid > 0 ? process_cpu(cfg.server_pid) : CpuSeconds{};
  double self0 = self_cpu_seconds();
  std::this_thread::sleep_until(w.end);
  const CpuSeconds server1 = cfg.server_pid > 0 ? process_cpu(cfg.server_pid) : CpuSeconds{};
  double self1 = self_cpu_seconds();
  for (auto& t : workers) t.join();

  LatencyHistogram latency;
  for (const auto& p : partial) {
    if (!p.error.empty() && result.error.empty()) result.error = p.error;
    result.requests += p.requests;
    result.cycles += p.cycles;
    latency.merge(p.latency);
  }
  result.seconds = cfg.duration_s;
  result.ops_per_s = static_cast<double>(result.requests) / cfg.duration_s;
  result.p50_us = latency.percentile_us(50);
  result.p99_us = latency.percentile_us(99);
  if (server0.known() && server1.known()) {
    const double total = server1.total() - server0.total();
    result.server_cpu = total / cfg.duration_s;
    if (total > 0) result.server_kernel_share = (server1.system - server0.system) / total;
  }
  result.generator_cpu = (self1 - self0) / cfg.duration_s;
  return result;
}

}  // namespace cohort::bench
