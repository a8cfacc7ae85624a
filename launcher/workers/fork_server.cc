#include "workers/fork_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cohort/base/deadline.h"
#include "cohort/base/json_number.h"
#include "cohort/base/worker_env_names.h"
#include "cohort/error.h"
#include "failure/failure.h"
#include "workers/child_descriptors.h"
#include "workers/proc_file.h"

namespace cohort::launch {
namespace {

constexpr size_t kMaxReply = 64 * 1024;

int open_log(const std::string& path) {
  if (path.empty()) return -1;
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
}

std::string cwd() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) != nullptr ? std::string(buf) : std::string();
}

// Sends one packet with `fds` beside it (SCM_RIGHTS). False with errno on failure.
bool send_with_fds(int channel, const std::string& text, const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(channel, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(text.size());
}

// One packet, waiting up to `timeout`; nullopt on timeout, "" when the peer closed.
std::optional<std::string> receive(int channel, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    char buf[kMaxReply];
    ssize_t n = ::recv(channel, buf, sizeof buf, MSG_DONTWAIT);
    if (n >= 0) return std::string(buf, static_cast<size_t>(n));
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return std::string();
    const int left_ms = poll_ms_left(deadline);
    if (left_ms == 0) return std::nullopt;
    pollfd p{channel, POLLIN, 0};
    ::poll(&p, 1, left_ms);
  }
}

std::map<std::string, std::string> as_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos) return {};
  size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start + 1));
}

}  // namespace

std::vector<std::string> ForkServer::command(const std::string& server_file,
                                             const std::vector<std::string>& worker,
                                             int channel_fd) {
  if (worker.size() < 3 || worker[1] != "-u") return {};
  std::vector<std::string> cmd{worker[0], "-u", server_file,
                               "--channel=" + std::to_string(channel_fd)};
  if (worker[2] == "-m") {
    if (worker.size() < 4) return {};
    cmd.push_back("--module=" + worker[3]);
  } else if (!worker[2].empty() && worker[2][0] != '-') {
    cmd.push_back("--script=" + worker[2]);
  } else {
    return {};
  }
  // A forked worker writes its command line over the server's (ps shows the worker's): the
  // server's is made as long as the worker's.
  auto length = [](const std::vector<std::string>& argv) {
    size_t n = 0;
    for (const auto& a : argv) n += a.size() + 1;
    return n;
  };
  const size_t want = length(worker), have = length(cmd);
  if (want > have + 1) cmd.push_back(std::string(want - have - 1, ' '));
  return cmd;
}

ForkServer::ForkServer(asio::io_context& io, ProcessSpawner& spawner, ForkServerSpec spec,
                       std::function<void()> changed)
    : io_(io),
      spawner_(spawner),
      spec_(std::move(spec)),
      changed_(std::move(changed)),
      started_(std::chrono::steady_clock::now()),
      channel_(io),
      pidfd_(io),
      drain_timer_(io) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    int e = errno;
    throw IoError(std::string("socketpair: ") + std::strerror(e), e);
  }
  ::fcntl(sv[0], F_SETFL, ::fcntl(sv[0], F_GETFL) | O_NONBLOCK);  // ours only: the server blocks
  channel_.assign(sv[0]);
  SpawnRequest req;
  req.argv = command(spec_.server_file, spec_.worker.argv, sv[1]);
  if (req.argv.empty()) {
    ::close(sv[1]);
    throw UsageError(
        "a fork server runs Python entry points ([python, -u, script.py | -m module])");
  }
  if (spec_.preload) req.argv.insert(req.argv.begin() + 5, "--preload=" + *spec_.preload);
  // The worker's environment, without any worker's descriptors (the spawner adds the heartbeat
  // only to workers), and the mark that says this is no worker.
  req.env = spec_.worker.env;
  req.env.push_back(std::string(worker_env::kInForkServer) + "=1");
  req.out = StreamMode::kPipe;
  req.err = StreamMode::kPipe;
  req.heartbeat = false;
  req.inherit_fds = {sv[1]};
  req.cpus = spec_.worker.cpus;
  req.mem_nodes = spec_.worker.mem_nodes;
  SpawnedProcess p;
  try {
    p = spawner_.spawn(req);
  } catch (...) {
    ::close(sv[1]);
    throw;
  }
  ::close(sv[1]);
  pid_ = p.pid;
  pidfd_.assign(p.pidfd);
  // Its output goes to its log; the tail explains a server that died.
  for (auto [fd, pump] : {std::pair{p.stdout_fd, &out_pump_}, std::pair{p.stderr_fd, &err_pump_}}) {
    if (fd < 0) continue;
    PumpRoute r;
    r.file_fd = open_log(spec_.log_file);
    r.keep_tail = true;
    const bool is_err = pump == &err_pump_;
    *pump = StreamPump::start(io_, fd, std::move(r),
                              [this, is_err, alive = std::weak_ptr<int>(alive_)] {
                                if (is_err && !alive.expired() && reaped_) report_exit();
                              });
  }
  pidfd_.async_wait(asio::posix::stream_descriptor::wait_read,
                    [this, alive = std::weak_ptr<int>(alive_)](std::error_code ec) {
                      if (!ec && !alive.expired()) on_exit();
                    });
  wait_hello();
}

ForkServer::~ForkServer() {
  alive_.reset();
  drain_timer_.cancel();
  std::error_code ignored;
  channel_.close(ignored);
  if (out_pump_) out_pump_->stop();
  if (err_pump_) err_pump_->stop();
  if (!reaped_ && pid_ > 0) {
    spawner_.kill_group(pid_, SIGKILL);
    // Never waited for without bound: what is not reaped here, the agent reaps as a stray.
    for (int i = 0; i < 100 && !spawner_.reap_if_exited(pid_); ++i) ::usleep(5000);
  }
  pidfd_.close(ignored);
}

void ForkServer::post_changed() {
  asio::post(io_, [this, alive = std::weak_ptr<int>(alive_)] {
    if (!alive.expired() && changed_) changed_();
  });
}

void ForkServer::set(State s, std::string reason) {
  if (state_ == s) return;
  state_ = s;
  reason_ = std::move(reason);
  post_changed();
}

void ForkServer::wait_hello() {
  channel_.async_wait(
      asio::posix::stream_descriptor::wait_read,
      [this, alive = std::weak_ptr<int>(alive_)](std::error_code ec) {
        if (ec || alive.expired() || state_ != State::kStarting) return;
        auto text = receive(channel_.native_handle(), std::chrono::milliseconds(0));
        if (!text) return wait_hello();  // woken for nothing
        if (text->empty()) return;       // it is exiting: on_exit() says why
        nlohmann::json m = nlohmann::json::parse(*text, nullptr, false);
        if (m.is_object() && m.value("ready", false)) {
          start_seconds_ =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
          set(State::kReady, {});
        } else {
          set(State::kRefused, m.is_object() && m.contains("error") && m["error"].is_string()
                                   ? m["error"].get<std::string>()
                                   : "it said something else than ready: " + *text);
        }
      });
}

void ForkServer::on_exit() {
  exit_status_ = spawner_.reap(pid_);
  reaped_ = true;
  // Its last words may still be in the pipe: they say why it died. Wait for its stderr to end,
  // briefly (a process it started may hold the pipe open).
  if (err_pump_ && !err_pump_->at_eof()) {
    drain_timer_.expires_after(std::chrono::milliseconds(500));
    drain_timer_.async_wait([this, alive = std::weak_ptr<int>(alive_)](std::error_code ec) {
      if (!ec && !alive.expired()) report_exit();
    });
    return;
  }
  report_exit();
}

void ForkServer::report_exit() {
  if (exit_reported_) return;
  exit_reported_ = true;
  drain_timer_.cancel();
  if (state_ != State::kStarting && state_ != State::kReady) return post_changed();  // said why
  std::string why = describe_exit(exit_status_).reason;
  if (err_pump_) {
    std::string tail = last_line(err_pump_->tail().text());
    if (!tail.empty()) why += ": " + tail;
  }
  set(State::kGone, "it " + why);
}

bool ForkServer::send(const SpawnRequest& request, std::string* why) {
  if (state_ != State::kReady) {
    *why = "it is not ready";
    return false;
  }
  // The worker's environment, as what differs from the one the server started with.
  nlohmann::json env_set = nlohmann::json::object(), env_unset = nlohmann::json::array();
  std::map<std::string, std::string> launch = as_map(spec_.worker.env);
  try {
    auto d = std::make_unique<ChildDescriptors>(request);
    std::map<std::string, std::string> now = as_map(d->env());
    for (const auto& [k, v] : now) {
      auto it = launch.find(k);
      if (it != launch.end() && it->second == v) continue;
      if (!worker_env::varies_by_attempt(k)) {
        *why = "the worker's environment variable " + k + " is not the server's";
        set(State::kRefused, *why);
        return false;
      }
      env_set[k] = v;
    }
    for (const auto& [k, v] : launch) {
      if (now.contains(k)) continue;
      if (!worker_env::varies_by_attempt(k)) {
        *why = "the worker's environment lacks the server's variable " + k;
        set(State::kRefused, *why);
        return false;
      }
      env_unset.push_back(k);
    }
    nlohmann::json targets = nlohmann::json::array();
    std::vector<int> fds;
    for (auto [here, there] : d->mapping()) {
      fds.push_back(here);
      targets.push_back(there);
    }
    // The workers' cgroup, which the server moves the worker into before it runs.
    const bool cgroup = request.cgroup_procs_fd >= 0;
    if (cgroup) fds.push_back(request.cgroup_procs_fd);
    std::string text;
    try {
      // Strict: an argument or variable that is no UTF-8 would reach the worker changed.
      text = nlohmann::json{{"argv", request.argv}, {"env_set", env_set}, {"env_unset", env_unset},
                            {"cwd", cwd()},         {"fds", targets},     {"agent", ::getpid()},
                            {"cgroup", cgroup}}
                 .dump();
    } catch (const nlohmann::json::exception&) {
      *why = "the worker's command or environment is not UTF-8";
      return false;
    }
    if (!send_with_fds(channel_.native_handle(), text, fds)) {
      *why = std::string("the request did not go through: ") + std::strerror(errno);
      set(State::kGone, *why);
      return false;
    }
    pending_ = std::move(d);
    return true;
  } catch (const IoError& e) {
    *why = e.what();
    return false;
  }
}

std::optional<SpawnedProcess> ForkServer::collect(std::string* why) {
  std::unique_ptr<ChildDescriptors> d = std::move(pending_);
  auto reply = receive(channel_.native_handle(), spec_.reply_timeout);
  if (!reply || reply->empty()) {
    *why = reply ? "it closed its channel"
                 : "it did not answer in " + std::to_string(spec_.reply_timeout.count()) + " ms";
    spawner_.kill_group(pid_, SIGKILL);
    set(State::kGone, *why);
    return std::nullopt;
  }
  nlohmann::json m = nlohmann::json::parse(*reply, nullptr, false);
  if (!m.is_object() || !m.contains("pid") || !json_number::whole<pid_t>(m["pid"])) {
    *why = m.is_object() && m.contains("error") && m["error"].is_string()
               ? m["error"].get<std::string>()
               : "it answered: " + *reply;
    if (m.is_object() && m.value("stale", false)) set(State::kRefused, *why);
    return std::nullopt;
  }
  const pid_t pid = *json_number::whole<pid_t>(m["pid"]);
  // The worker must be this process's child (adopted as the child subreaper), or nobody could
  // wait for it; a worker that is not exits by itself.
  const std::vector<std::string> stat = proc_stat_fields(pid);
  if (stat.size() < 2 || std::atoi(stat[1].c_str()) != ::getpid()) {
    *why = "its worker (pid " + std::to_string(pid) + ") is not cohortrun's child";
    set(State::kRefused, *why);
    return std::nullopt;
  }
  ::setpgid(pid, pid);  // it leads its group already; this cannot hurt
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    *why = std::string("pidfd_open: ") + std::strerror(errno);
    spawner_.kill_group(pid, SIGKILL);
    spawner_.reap(pid);
    return std::nullopt;
  }
  ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
  return d->finish(pid, pidfd);
}

}  // namespace cohort::launch
