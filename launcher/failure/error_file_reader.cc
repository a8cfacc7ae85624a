#include "failure/error_file_reader.h"

#include <pthread.h>

#include <algorithm>
#include <asio/post.hpp>
#include <mutex>
#include <thread>

namespace cohort::launch {

// What the reader and its reading threads share: the loop to post to, cut by the destructor.
struct ErrorFileReader::Shared {
  std::mutex mu;
  asio::io_context* io = nullptr;  // GUARDED_BY(mu); null once the reader is gone
};

// One read, owned by the reader (loop thread only): settled once, by the result or by the limit.
struct ErrorFileReader::Pending {
  Done done;
  std::unique_ptr<LoopTimer> timer;
};

ErrorFileReader::ErrorFileReader(asio::io_context& io, LoopClock& clock,
                                 std::chrono::milliseconds limit)
    : clock_(clock), limit_(limit), shared_(std::make_shared<Shared>()) {
  shared_->io = &io;
}

ErrorFileReader::~ErrorFileReader() {
  std::lock_guard lock(shared_->mu);
  shared_->io = nullptr;
}

void ErrorFileReader::settle(const std::shared_ptr<Pending>& p,
                             std::optional<ErrorFileContent> content) {
  auto it = std::find(pending_.begin(), pending_.end(), p);
  if (it == pending_.end()) return;  // settled already
  pending_.erase(it);
  p->timer->cancel();
  p->done(std::move(content));
}

void ErrorFileReader::read(std::string path, Done done) {
  auto pending = std::make_shared<Pending>();
  pending->done = std::move(done);
  pending->timer = clock_.make_timer();
  pending_.push_back(pending);
  // Callbacks hold the read weakly: once settled (or the reader gone) it is gone with them.
  std::weak_ptr<Pending> weak = pending;
  pending->timer->start(limit_, [this, weak, path, limit = limit_] {
    if (auto p = weak.lock()) {
      ErrorFileContent c;
      c.message = "the error file " + path + " could not be read within " +
                  std::to_string(limit.count()) + " ms (a file system that does not answer?)";
      settle(p, std::move(c));
    }
  });
  std::thread([this, shared = shared_, weak, path = std::move(path)] {
    pthread_setname_np(pthread_self(), "cohort-errfile");
    auto content = read_error_file(path);
    std::lock_guard lock(shared->mu);
    if (shared->io == nullptr) return;  // the reader is gone: `this` with it
    asio::post(*shared->io, [this, shared, weak, content = std::move(content)]() mutable {
      {
        std::lock_guard gone(shared->mu);
        if (shared->io == nullptr) return;  // the reader went while this waited in the queue
      }
      if (auto p = weak.lock()) settle(p, std::move(content));
    });
  }).detach();
}

}  // namespace cohort::launch
