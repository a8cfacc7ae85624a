#include "workers/file_timer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "cohort/base/json_number.h"
#include "cohort/base/random.h"
#include "cohort/base/worker_env_names.h"
#include "cohort/error.h"

namespace cohort::launch {
namespace {

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// torchrun's watchdog loop wakes at least this often (its max_interval).
constexpr double kMaxIntervalS = 0.1;

}  // namespace

std::string file_timer_path(const EnvMap& env) {
  auto enabled = env.find(worker_env::kEnableFileTimer);
  if (enabled == env.end() || enabled->second != "1") return "";
  auto named = env.find("TORCHELASTIC_TIMER_FILE");
  if (named != env.end() && !named->second.empty()) return named->second;
  auto tmp = env.find("TMPDIR");
  std::string dir = tmp != env.end() && !tmp->second.empty() ? tmp->second : "/tmp";
  return dir + "/watchdog_timer_" + random_tag(16);
}

bool FileTimerServer::parse_request(const std::string& line, Request* out) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  auto pid = j.find("pid");
  auto scope = j.find("scope_id");
  auto expiration = j.find("expiration_time");
  if (pid == j.end() || !json_number::whole<pid_t>(*pid) || scope == j.end() ||
      !scope->is_string() || expiration == j.end() || !expiration->is_number())
    return false;
  out->pid = *json_number::whole<pid_t>(*pid);
  out->scope = scope->get<std::string>();
  out->expiration_time = expiration->get<double>();
  auto sig = j.find("signal");
  out->signal = sig != j.end() ? json_number::whole<int>(*sig).value_or(0) : 0;
  return out->pid > 0;
}

FileTimerServer::FileTimerServer(asio::io_context& io, std::string path,
                                 std::shared_ptr<spdlog::logger> log, OnExpired on_expired)
    : path_(std::move(path)),
      log_(std::move(log)),
      on_expired_(std::move(on_expired)),
      fifo_(io),
      check_timer_(io) {
  ::unlink(path_.c_str());  // as torchrun: a stale FIFO of an earlier run is replaced
  if (::mkfifo(path_.c_str(), 0600) != 0) {
    const int err = errno;
    throw IoError("cannot create the file-timer FIFO " + path_ +
                      " (TORCHELASTIC_TIMER_FILE): " + std::strerror(err),
                  err);
  }
  int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) keep_open_fd_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 || keep_open_fd_ < 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(path_.c_str());
    throw IoError("cannot open the file-timer FIFO " + path_ + ": " + std::strerror(err), err);
  }
  fifo_.assign(fd);
  read_more();
}

FileTimerServer::~FileTimerServer() {
  alive_.reset();
  std::error_code ignored;
  fifo_.close(ignored);
  check_timer_.cancel();
  if (keep_open_fd_ >= 0) ::close(keep_open_fd_);
  ::unlink(path_.c_str());
}

void FileTimerServer::forget(pid_t pid) {
  for (auto it = timers_.begin(); it != timers_.end();)
    it = it->first.first == pid ? timers_.erase(it) : std::next(it);
}

void FileTimerServer::read_more() {
  fifo_.async_read_some(
      asio::buffer(buf_), [this, alive = std::weak_ptr<int>(alive_)](std::error_code ec, size_t n) {
        if (alive.expired() || ec == asio::error::operation_aborted) return;
        if (ec) {
          log_->warn("file timer: reading {} failed ({}); timers are off", path_, ec.message());
          return;
        }
        partial_.append(buf_, n);
        size_t start = 0;
        for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
          on_line(partial_.substr(start, nl - start));
        partial_.erase(0, start);
        if (partial_.size() > 64 * 1024) partial_.clear();  // no client writes lines this long
        check();
        read_more();
      });
}

void FileTimerServer::on_line(const std::string& line) {
  Request r;
  if (!parse_request(line, &r)) {
    log_->warn("file timer: skipped a line that is not a FileTimerRequest: {}",
               line.substr(0, 200));
    return;
  }
  auto key = std::make_pair(r.pid, r.scope);
  if (r.expiration_time < 0) {
    timers_.erase(key);
  } else {
    timers_[key] = Timer{r.expiration_time, r.signal};
  }
}

void FileTimerServer::check() {
  const double now = wall_now();
  // Every pid with an expired timer: reported once, with its earliest expired timer that has a
  // signal (torchrun's order); its timers then go, signalled or not.
  std::map<pid_t, std::pair<double, std::pair<std::string, int>>> expired;
  for (const auto& [key, t] : timers_) {
    if (t.expiration_time > now) continue;
    auto& e =
        expired.try_emplace(key.first, HUGE_VAL, std::make_pair(std::string(), 0)).first->second;
    if (t.signal > 0 && t.expiration_time < e.first)
      e = {t.expiration_time, {key.second, t.signal}};
  }
  std::weak_ptr<int> alive = alive_;
  for (const auto& [pid, e] : expired) {
    forget(pid);
    if (e.second.second > 0) {
      on_expired_(pid, e.second.first, e.second.second);
      if (alive.expired()) return;  // the callback destroyed us
    }
  }
  double next = HUGE_VAL;
  for (const auto& [key, t] : timers_) next = std::min(next, t.expiration_time);
  check_timer_.cancel();
  if (next == HUGE_VAL) return;
  double wait_s = std::clamp(next - now, 0.0, kMaxIntervalS * 10);
  check_timer_.expires_after(std::chrono::microseconds(static_cast<int64_t>(wait_s * 1e6) + 1000));
  check_timer_.async_wait([this, alive = std::weak_ptr<int>(alive_)](std::error_code ec) {
    if (!ec && !alive.expired()) check();
  });
}

}  // namespace cohort::launch
