#include "cohort/rdzv/cohortd.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>

#include "cohort/base/cli11.h"
#include "cohort/base/logging.h"
#include "cohort/base/metrics_endpoint.h"
#include "cohort/error.h"
#include "server/cohortd_log.h"
#include "server/service_notify.h"

namespace cohort::rdzv {

MetricsAddress cohortd_metrics_address(const CohortdConfig& config) {
  return metrics_address(config.metrics_addr, config.metrics_port, "127.0.0.1");
}

int parse_cohortd_args(int argc, char** argv, CohortdConfig* config) {
  CLI::App app{
      "cohortd: a rendezvous store, wire-compatible with PyTorch's TCPStore (1.13 and 2.x)"};
  auto& s = config->server;
  app.add_option("--host", s.host, "Address to listen on (IPv4, IPv6 or name)")
      ->capture_default_str();
  app.add_option("--port", s.port, "Port to listen on; 0 picks a free one")->capture_default_str();
  app.add_option("--port-file", config->port_file,
                 "Write the bound port to this file once listening");
  app.add_option("--max-key-bytes", s.limits.max_key_bytes, "Largest key accepted")
      ->capture_default_str();
  app.add_option("--max-value-bytes", s.limits.max_value_bytes, "Largest value accepted")
      ->capture_default_str();
  app.add_option("--max-keys-per-request", s.limits.max_keys_per_request,
                 "Most keys in one CHECK/WAIT/MULTI_GET/MULTI_SET")
      ->capture_default_str();
  app.add_option("--max-request-bytes", s.max_request_bytes, "Largest whole request")
      ->capture_default_str();
  app.add_option("--max-connections", s.max_connections,
                 "Open connections; further ones are closed at once")
      ->capture_default_str();
  app.add_option("--max-waiters", s.max_waiters, "Parked WAIT requests")->capture_default_str();
  app.add_option("--accept-queues", s.accept_queues,
                 "Listening sockets on the port (SO_REUSEPORT), each queueing as many connections "
                 "as net.core.somaxconn allows; 0: enough for about 32,768 waiting connections "
                 "(at most 8)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  std::string token_file, allow;
  app.add_option("--auth-token-file", token_file,
                 "Require every client to prove it knows the token in this file (HMAC challenge)");
  app.add_option("--allow-unauthenticated-from", allow,
                 "Networks (a.b.c.d/n, comma-separated) whose clients may skip the token: "
                 "PyTorch's own clients cannot authenticate");
  std::string fsync = "interval";
  app.add_option("--data-dir", s.data_dir,
                 "Keep the store in this directory: a restarted cohortd has every key and counter");
  app.add_option("--fsync", fsync,
                 "With --data-dir: always (every write), interval (every 100 ms) or never; a "
                 "killed cohortd loses nothing either way, a crashed machine at most the interval")
      ->capture_default_str();
  app.add_option("--max-connections-per-address", s.max_connections_per_address,
                 "Open connections one client address may hold; more are closed at accept (0: no "
                 "limit)")
      ->capture_default_str();
  double handshake_timeout_s = s.handshake_timeout.count() / 1000.0;
  app.add_option("--handshake-timeout", handshake_timeout_s,
                 "With --auth-token-file: seconds a connection has to complete the token "
                 "handshake (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  double first_request_timeout_s = s.first_request_timeout.count() / 1000.0;
  app.add_option("--first-request-timeout", first_request_timeout_s,
                 "Seconds a connection that needs no token has to complete its first request; "
                 "closed otherwise, unless a connection from its address has (PyTorch 1.13's "
                 "silent callback connection) (0: no limit). Connections that have spoken are "
                 "kept however long they stay idle")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  double idle_timeout_s = 0;
  app.add_option("--idle-timeout", idle_timeout_s,
                 "Close a connection with nothing parked (no WAIT, no watch) that sent nothing "
                 "for this many seconds (0: never). Not for PyTorch's TCPStore clients: they stay "
                 "silent for hours between requests and never reconnect")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--accept-log-damage", s.accept_log_damage,
               "With --data-dir: when store.log is damaged before its last record, keep what "
               "precedes the damage (the file is first copied aside) instead of refusing to start");
  double request_timeout_s = s.request_timeout.count() / 1000.0;
  app.add_option("--request-timeout", request_timeout_s,
                 "Seconds a client may take to finish a request it has begun (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  double exit_when_idle_s = 0;
  app.add_option("--exit-when-idle", exit_when_idle_s,
                 "Exit once no client has been connected for this many seconds (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-unsent-bytes", s.max_unsent_bytes,
                 "Bytes one connection may have unsent (replies, watch notifications) or buffered "
                 "behind a parked WAIT: its requests wait while it is there, and a notification "
                 "past it closes the connection")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-memory", s.max_memory,
                 "Bytes of keys, values and queued items the store may hold (0: no cap): a write "
                 "past it closes its connection with a log line (TCPStore has no error reply; "
                 "PyTorch's clients raise at their next request); reads go on, deletes make room")
      ->capture_default_str();
  app.add_option("--connection-memory-budget", s.connection_memory_budget,
                 "Unsent and buffered bytes of all connections together: past it, the connection "
                 "holding the most is closed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--metrics-port", config->metrics_port,
                 "Serve Prometheus metrics at http://127.0.0.1:PORT/metrics (0: a free port, "
                 "logged); off by default. Loopback whatever --host is: they say what the store "
                 "holds and who uses it, token or not");
  app.add_option("--metrics-addr", config->metrics_addr,
                 "Serve Prometheus metrics at http://HOST:PORT/metrics instead (for example "
                 "0.0.0.0:9400 for a Prometheus on another host)");
  app.add_option("--log-file", config->log_file, "Append log lines to this file instead of stderr");
  app.add_option("--log-format", config->log_format,
                 "text, or json: one JSON object per line (time, logger, level, pid, msg)")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  // --version, exit status 2 on usage errors, placeholders, COHORTD_<FLAG> and --config for
  // every option above (base/include/cohort/base/cli11.h): options added above get them too.
  cli::apply(app, {.program = "cohortd",
                   .env_prefix = "COHORTD_",
                   .config_file = true,
                   .placeholders = {{"--fsync", "always|interval|never"},
                                    {"--metrics-addr", "HOST:PORT"},
                                    {"--allow-unauthenticated-from", "CIDR[,CIDR...]"}}});
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli::exit_status(app, e);
  }
  s.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000));
  s.handshake_timeout = std::chrono::milliseconds(static_cast<int64_t>(handshake_timeout_s * 1000));
  s.first_request_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(first_request_timeout_s * 1000));
  s.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(idle_timeout_s * 1000));
  config->exit_when_idle = std::chrono::milliseconds(static_cast<int64_t>(exit_when_idle_s * 1000));
  try {
    s.fsync = parse_fsync_policy(fsync);
    if (!token_file.empty()) {
      s.auth_token = auth::read_token_file(token_file);
      std::string warning = auth::check_token_file(token_file, s.auth_token);
      if (!warning.empty()) std::fprintf(stderr, "cohortd: warning: %s\n", warning.c_str());
    }
    s.allow_unauthenticated = auth::parse_cidrs(allow);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortd: %s\n", e.what());
    return 2;
  }
  try {
    (void)cohortd_metrics_address(*config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortd: %s\n", e.what());
    return 2;
  }
  if (s.auth_token.empty() && !s.allow_unauthenticated.empty()) {
    std::fprintf(stderr, "cohortd: --allow-unauthenticated-from needs --auth-token-file\n");
    return 2;
  }
  return -1;
}

long raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return static_cast<long>(rl.rlim_cur);
}

namespace {

void write_port_file(const std::string& path, uint16_t port) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << port << "\n";
    if (!f.flush()) throw Error("cannot write --port-file " + path);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot write --port-file " + path);
}

// --exit-when-idle: polls the connection count (a few times per idle period) and calls `stop` once
// it has been 0 for the whole period.
class IdleExit {
 public:
  IdleExit(asio::io_context& io, const StoreServer& server, std::chrono::milliseconds idle,
           std::shared_ptr<spdlog::logger> log, std::function<void()> stop)
      : server_(server), idle_(idle), timer_(io), log_(std::move(log)), stop_(std::move(stop)) {
    if (idle_.count() <= 0) return;
    last_busy_ = std::chrono::steady_clock::now();
    poll();
  }
  ~IdleExit() { cancel(); }
  void cancel() { timer_.cancel(); }

 private:
  void poll() {
    const auto now = std::chrono::steady_clock::now();
    if (server_.stats().connections > 0) last_busy_ = now;
    if (now - last_busy_ >= idle_) {
      log_->info("no client for {} ms (--exit-when-idle), stopping", idle_.count());
      stop_();
      return;
    }
    timer_.expires_after(std::clamp<std::chrono::milliseconds>(
        idle_ / 4, std::chrono::milliseconds(10), std::chrono::seconds(1)));
    timer_.async_wait([this](std::error_code ec) {
      if (!ec) poll();
    });
  }

  const StoreServer& server_;
  std::chrono::milliseconds idle_;
  asio::steady_timer timer_;
  std::shared_ptr<spdlog::logger> log_;
  std::function<void()> stop_;
  std::chrono::steady_clock::time_point last_busy_;
};

}  // namespace

int run_cohortd(const CohortdConfig& config) {
  // A log or stdout reader that went away must not kill the store (its keys live only here
  // without --data-dir); sockets already write with MSG_NOSIGNAL.
  std::signal(SIGPIPE, SIG_IGN);
  CohortdLog logging(config.log_file, parse_log_format(config.log_format));
  auto log = component_logger("cohortd");
  long fds = raise_fd_limit();
  asio::io_context io(1);
  StoreServer server(io, config.server);
  std::printf("%s\n", server.address().c_str());
  std::fflush(stdout);
  if (!config.port_file.empty()) write_port_file(config.port_file, server.port());
  const StoreServerStats started = server.stats();
  log->info("listening on {} (both TCPStore dialects; {} descriptors; accept queues {} x {}; {})",
            server.address(), fds, started.accept_queues, started.accept_queue_length,
            config.server.auth_token.empty()
                ? "no authentication: anyone who can connect may use it"
                : "token required");

  std::unique_ptr<MetricsEndpoint> metrics;
  if (auto where = cohortd_metrics_address(config); where.enabled()) {
    metrics =
        std::make_unique<MetricsEndpoint>(io, where, [&server] { return server.metrics_text(); });
    log->info("serving metrics at {}", metrics->url());
  }

  asio::steady_timer drops(io);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  // Whatever ends the loop (a signal, --exit-when-idle) cancels everything else waiting on it.
  std::function<void()> idle_cancel;
  auto stop = [&] {
    notify_service_manager("STOPPING=1");
    std::error_code ignored;
    signals.cancel(ignored);
    if (idle_cancel) idle_cancel();
    drops.cancel();
    metrics.reset();
    server.stop();
  };
  IdleExit idle(io, server, config.exit_when_idle, log, stop);
  idle_cancel = [&] { idle.cancel(); };
  signals.async_wait([&](std::error_code ec, int sig) {
    if (ec) return;
    log->info("signal {} received, stopping", sig);
    stop();
  });
  // Lines dropped because nobody read the log fast enough are said, once there is room again.
  std::function<void()> report_drops = [&] {
    drops.expires_after(std::chrono::seconds(5));
    drops.async_wait([&](std::error_code ec) {
      if (ec) return;
      if (uint64_t n = logging.take_dropped())
        log->warn("{} log lines were dropped: the log was not read fast enough", n);
      report_drops();
    });
  };
  report_drops();
  // Under a Type=notify unit (packaging/cohortd.service.in), systemd hears that clients can
  // connect, once a SIGTERM would also stop the store in order (the signal set above).
  if (std::string why = notify_service_manager("READY=1\nSTATUS=listening on " + server.address());
      !why.empty()) {
    log->warn("cannot tell the service manager that cohortd is ready: {}", why);
  }
  io.run();
  auto st = server.stats();
  if (uint64_t n = logging.take_dropped())
    log->warn("{} log lines were dropped: the log was not read fast enough", n);
  log->info("stopped after {} connections ({} closed for never speaking or for --idle-timeout)",
            st.accepted, st.closed_silent);
  return 0;
}

}  // namespace cohort::rdzv
