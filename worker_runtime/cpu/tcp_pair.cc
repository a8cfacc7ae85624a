#include "cpu/tcp_pair.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace cohort::detail {
namespace {

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", std::chrono::duration<double>(d).count());
  return buf;
}

bool finished(const Transfer& t) {
  return t.done == t.bytes;
}

void report(Transfer& t, bool final) {
  if (!t.on_progress) return;
  if (t.done > t.reported && (final || t.done - t.reported >= t.granule)) {
    const size_t from = t.reported;
    t.reported = t.done;
    t.on_progress(from, t.done);
  }
}

// Moves as many bytes as the socket takes. Returns false when it would block.
bool step(Transfer& t) {
  if (t.send) {
    const size_t limit = t.available != nullptr ? std::min(t.bytes, *t.available) : t.bytes;
    if (t.done >= limit) return false;
    const ssize_t n =
        ::send(t.pair->fd(), t.data + t.done, limit - t.done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      t.done += static_cast<size_t>(n);
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    throw PeerFailure(t.pair->peer_rank(), false,
                      "rank " + std::to_string(t.pair->peer_rank()) +
                          " closed its connection (send: " + std::strerror(errno) + ")");
  }
  const ssize_t n = ::recv(t.pair->fd(), t.data + t.done, t.bytes - t.done, MSG_DONTWAIT);
  if (n > 0) {
    t.done += static_cast<size_t>(n);
    report(t, finished(t));
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  throw PeerFailure(
      t.pair->peer_rank(), false,
      "rank " + std::to_string(t.pair->peer_rank()) +
          (n == 0 ? std::string(" closed its connection (EOF)")
                  : " connection failed (" + std::string(std::strerror(errno)) + ")"));
}

}  // namespace

TcpPair::TcpPair(int fd, int peer_rank) : fd_(fd), peer_rank_(peer_rank) {
  const int flags = ::fcntl(fd_, F_GETFL, 0);
  ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
}

TcpPair::~TcpPair() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpPair::shutdown() noexcept {
  ::shutdown(fd_, SHUT_RDWR);
}

void run_transfers(std::span<Transfer> transfers, const Call& call) {
  std::vector<pollfd> fds;
  std::vector<Transfer*> owners;
  for (;;) {
    // Make progress without polling while sockets take or give bytes.
    bool moved = true;
    while (moved) {
      moved = false;
      for (Transfer& t : transfers) {
        if (!finished(t)) moved = step(t) || moved;
      }
    }
    fds.clear();
    owners.clear();
    for (Transfer& t : transfers) {
      if (finished(t)) continue;
      if (t.send && t.available != nullptr && t.done >= std::min(t.bytes, *t.available)) continue;
      fds.push_back(pollfd{t.pair->fd(), static_cast<short>(t.send ? POLLOUT : POLLIN), 0});
      owners.push_back(&t);
    }
    if (fds.empty()) {
      bool all = true;
      for (Transfer& t : transfers) all = all && finished(t);
      if (all) return;
      // Only sends waiting for forwarded bytes remain, and nothing feeds them: a logic error.
      throw PeerFailure(-1, false, "internal error: a forwarding send has no source");
    }
    const auto now = Clock::now();
    if (now >= call.deadline) {
      const int peer = owners.front()->pair->peer_rank();
      throw PeerFailure(peer, true,
                        "rank " + std::to_string(peer) + " did not " +
                            (owners.front()->send ? "take" : "send") + " its data within " +
                            seconds(call.deadline - call.start) + " (" +
                            std::to_string(owners.front()->done) + " of " +
                            std::to_string(owners.front()->bytes) + " bytes moved)");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(call.deadline - now);
    const int ms = static_cast<int>(std::min<int64_t>(left.count() + 1, 1000));
    const int rc = ::poll(fds.data(), fds.size(), ms);
    if (rc < 0 && errno != EINTR) {
      throw PeerFailure(-1, false, std::string("poll failed: ") + std::strerror(errno));
    }
    // Errors and hang-ups surface in the next step() as EOF or a socket error.
  }
}

void exchange(TcpPair* to, const void* send, size_t send_bytes, TcpPair* from, void* recv,
              size_t recv_bytes, const Call& call) {
  Transfer t[2];
  int n = 0;
  if (to != nullptr && send_bytes > 0) {
    t[n].pair = to;
    t[n].send = true;
    t[n].data = const_cast<char*>(static_cast<const char*>(send));
    t[n].bytes = send_bytes;
    ++n;
  }
  if (from != nullptr && recv_bytes > 0) {
    t[n].pair = from;
    t[n].data = static_cast<char*>(recv);
    t[n].bytes = recv_bytes;
    ++n;
  }
  run_transfers(std::span<Transfer>(t, n), call);
}

}  // namespace cohort::detail
