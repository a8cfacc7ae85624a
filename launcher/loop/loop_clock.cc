#include "loop/loop_clock.h"

#include <algorithm>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

namespace cohort::launch {
namespace {

class AsioTimer final : public LoopTimer {
 public:
  explicit AsioTimer(asio::io_context& io) : timer_(io) {}
  ~AsioTimer() override { cancel(); }

  void start(std::chrono::milliseconds after, std::function<void()> fire) override {
    // A handler already queued for an earlier expiry must not run: the generation tells.
    const uint64_t gen = ++generation_;
    armed_ = true;
    fire_ = std::move(fire);
    timer_.expires_after(after);
    timer_.async_wait([this, gen, alive = std::weak_ptr<int>(alive_)](std::error_code ec) {
      if (ec || alive.expired() || gen != generation_ || !armed_) return;
      armed_ = false;
      auto fire = std::move(fire_);
      fire();
    });
  }
  void cancel() override {
    ++generation_;
    armed_ = false;
    fire_ = nullptr;
    timer_.cancel();
  }
  bool armed() const override { return armed_; }

 private:
  asio::steady_timer timer_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // handlers see the timer's death
  std::function<void()> fire_;
  uint64_t generation_ = 0;
  bool armed_ = false;
};

class AsioLoopClock final : public LoopClock {
 public:
  explicit AsioLoopClock(asio::io_context& io) : io_(io) {}
  Clock& clock() override { return Clock::steady(); }
  std::unique_ptr<LoopTimer> make_timer() override { return std::make_unique<AsioTimer>(io_); }

 private:
  asio::io_context& io_;
};

}  // namespace

std::unique_ptr<LoopClock> make_asio_loop_clock(asio::io_context& io) {
  return std::make_unique<AsioLoopClock>(io);
}

class ManualLoopClock::Timer final : public LoopTimer {
 public:
  explicit Timer(ManualLoopClock& owner) : owner_(owner) { owner_.timers_.push_back(this); }
  ~Timer() override {
    cancel();
    auto& v = owner_.timers_;
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  void start(std::chrono::milliseconds after, std::function<void()> fire) override {
    ++generation_;
    armed_ = true;
    deadline_ = owner_.clock_.now() + after;
    fire_ = std::move(fire);
  }
  void cancel() override {
    ++generation_;
    armed_ = false;
    fire_ = nullptr;
  }
  bool armed() const override { return armed_; }

  // Posts the callback when due (called by advance()).
  void post_if_due(Clock::time_point now) {
    if (!armed_ || deadline_ > now) return;
    armed_ = false;
    asio::post(owner_.io_, [fire = std::move(fire_), gen = generation_, this,
                            alive = std::weak_ptr<int>(alive_)] {
      if (alive.expired() || gen != generation_) return;
      fire();
    });
  }
  Clock::time_point deadline() const { return deadline_; }

 private:
  ManualLoopClock& owner_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  std::function<void()> fire_;
  Clock::time_point deadline_;
  uint64_t generation_ = 0;
  bool armed_ = false;
};

ManualLoopClock::ManualLoopClock(asio::io_context& io) : io_(io) {}
ManualLoopClock::~ManualLoopClock() = default;

std::unique_ptr<LoopTimer> ManualLoopClock::make_timer() {
  return std::make_unique<Timer>(*this);
}

void ManualLoopClock::advance(std::chrono::milliseconds d) {
  clock_.advance(d);
  std::vector<Timer*> due;
  const auto now = clock_.now();
  for (Timer* t : timers_)
    if (t->armed() && t->deadline() <= now) due.push_back(t);
  std::stable_sort(due.begin(), due.end(),
                   [](Timer* a, Timer* b) { return a->deadline() < b->deadline(); });
  for (Timer* t : due) t->post_if_due(now);
}

std::optional<Clock::time_point> ManualLoopClock::next_deadline() const {
  std::optional<Clock::time_point> next;
  for (const Timer* t : timers_)
    if (t->armed() && (!next || t->deadline() < *next)) next = t->deadline();
  return next;
}

}  // namespace cohort::launch
