#include "generator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <unistd.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "cohort/rdzv/relay.h"
#include "ranks.h"

namespace cohort::bench {
namespace {

void write_line(int fd, const std::string& line) {
  std::string s = line + "\n";
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

bool read_byte(int fd) {
  char c;
  return ::read(fd, &c, 1) == 1;
}

void to_sockaddr(const std::string& host, int port, sockaddr_storage* out, socklen_t* len) {
  auto* a = reinterpret_cast<sockaddr_in*>(out);
  a->sin_family = AF_INET;
  a->sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a->sin_addr);
  *len = sizeof(sockaddr_in);
}

int64_t ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

std::string node_address(int node) {
  // 254 hosts per /24 (no .0, no .255), from 127.1.0.1 on.
  const int host = node % 254 + 1;
  const int net = node / 254;
  return "127." + std::to_string(1 + net / 256) + "." + std::to_string(net % 256) + "." +
         std::to_string(host);
}

int run_generator(const GeneratorSpec& spec, int to_parent, int from_parent) {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);

  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::vector<std::unique_ptr<rdzv::StoreRelay>> relays;
  std::vector<RankTarget> targets;
  try {
    for (int n = spec.first_node; n < spec.first_node + spec.nodes; ++n) {
      const std::string addr = node_address(n);
      RankTarget t;
      if (spec.path == StormPath::kRelay) {
        rdzv::StoreRelayOptions o;
        o.store_host = spec.store_host;
        o.store_port = spec.store_port;
        o.source_host = addr;
        o.connect_timeout = std::chrono::seconds(30);
        o.max_clients = static_cast<size_t>(spec.ranks_per_node) * 2;
        relays.push_back(std::make_unique<rdzv::StoreRelay>(io, o));
        to_sockaddr(relays.back()->host(), relays.back()->port(), &t.dial, &t.dial_len);
      } else {
        to_sockaddr(spec.store_host, spec.store_port, &t.dial, &t.dial_len);
        to_sockaddr(addr, 0, &t.source, &t.source_len);
      }
      for (int r = 0; r < spec.ranks_per_node; ++r) targets.push_back(t);
    }
  } catch (const std::exception& e) {
    write_line(to_parent, std::string("error ") + e.what());
    return 1;
  }
  std::thread loop([&io] { io.run(); });
  write_line(to_parent, "ready");
  if (!read_byte(from_parent)) {
    work.reset();
    io.stop();
    loop.join();
    return 1;
  }
  RanksConfig cfg;
  cfg.dialect = spec.dialect;
  cfg.job_ranks = spec.job_ranks;
  cfg.key_prefix = spec.key_prefix;
  cfg.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(spec.timeout_s));
  run_ranks(targets, cfg, [&](const RanksResult& r) {
    if (!r.error.empty()) {
      write_line(to_parent, "error " + r.error);
    } else {
      char line[256];
      std::snprintf(line, sizeof(line), "ok %d %d %lld %lld %.3f", r.connected, r.released,
                    static_cast<long long>(ns(r.all_connected)),
                    static_cast<long long>(ns(r.last_released)), r.max_connect_ms);
      write_line(to_parent, line);
    }
    read_byte(from_parent);
  });
  // StoreRelay's destructor must run on... before run() or on the loop: stop the loop first.
  work.reset();
  io.stop();
  loop.join();
  relays.clear();
  return 0;
}

}  // namespace cohort::bench
