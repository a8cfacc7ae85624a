// libcohort's answers to cohortrun's hang probes (worker_runtime/probe_server.h): two ranks of a
// CPU group as threads of this process, one inside an allreduce, the other not yet; the test asks
// on a real control socket, as cohortrun does, and reads the answer with cohortrun's parser.
// Each test of this binary runs in a process of its own (the server starts once per process).
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "cohort/base/hang_probe.h"
#include "cohort/base/heartbeat_line.h"
#include "cohort/base/worker_env_names.h"
#include "cohort/cpu_process_group.h"
#include "cohort/rdzv/memory_store.h"

namespace cohort {
namespace {

std::string read_line(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  char c;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return {};
    if (::read(fd, &c, 1) != 1) return {};
    if (c == '\n') return line;
    line.push_back(c);
  }
}

hang_probe::ProbeAnswer ask(int fd, int64_t id) {
  const std::string q = hang_probe::encode_request(id);
  EXPECT_EQ(::write(fd, q.data(), q.size()), static_cast<ssize_t>(q.size()));
  const std::string line = read_line(fd, std::chrono::seconds(10));
  EXPECT_FALSE(line.empty()) << "no answer to probe " << id;
  return hang_probe::parse_answer(line);
}

TEST(ProbeServer, AnswersWithEachGroupsCountAndTheCollectiveInProgress) {
  int sock[2], beats[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock), 0);
  ASSERT_EQ(::pipe2(beats, O_CLOEXEC | O_NONBLOCK), 0);
  // What cohortrun hands a worker, before its first group.
  ::setenv(worker_env::kControlFd, std::to_string(sock[1]).c_str(), 1);
  ::setenv(worker_env::kHeartbeatFd, std::to_string(beats[1]).c_str(), 1);

  MemoryStore store;
  ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::thread rank1([&] {
    auto pg = new_cpu_process_group(store, 1, 2, o, "h");
    std::vector<float> x(4, 1.0f);
    pg->allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);  // collective 1
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return go; });  // not in the second: the culprit
    pg->allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
  });
  auto pg = new_cpu_process_group(store, 0, 2, o, "h");
  std::vector<float> x(4, 1.0f);
  pg->allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
  std::thread rank0([&] {
    std::vector<float> y(6, 1.0f);
    pg->allreduce(y.data(), y.size(), DataType::kFloat32, ReduceOp::kSum);  // waits for rank 1
  });

  // Its hello said it answers probes.
  heartbeat_pipe::HeartbeatParser p;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char buf[256];
  while (!p.hello() && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = ::read(beats[0], buf, sizeof buf);
    if (n > 0)
      p.feed(std::string_view(buf, static_cast<size_t>(n)));
    else
      ::usleep(1000);
  }
  ASSERT_TRUE(p.hello().has_value());
  EXPECT_EQ(p.hello()->pid, ::getpid());
  EXPECT_TRUE(p.hello()->has(heartbeat_pipe::kProbeFeature));

  // Ask until rank 0 is inside its second allreduce.
  hang_probe::ProbeAnswer a;
  for (int64_t id = 1; id < 1000; ++id) {
    a = ask(sock[0], id);
    ASSERT_EQ(a.id, id);
    bool waiting = false;
    for (const auto& c : a.collectives) waiting = waiting || (!c.done && c.seq == 2);
    if (waiting) break;
    ::usleep(2000);
  }
  EXPECT_EQ(a.pid, ::getpid());
  EXPECT_TRUE(a.threads.empty());  // no native stacks here
  ASSERT_EQ(a.groups.size(), 2u);  // both ranks' groups live in this process
  for (const auto& g : a.groups) {
    EXPECT_EQ(g.name, "cohort/0");
    EXPECT_EQ(g.backend, "cohort-cpu");
    EXPECT_EQ(g.ranks, (std::vector<int>{0, 1}));
  }
  // Rank 1's group issued one, rank 0's two, the second not done (the two groups register in
  // whichever order their rendezvous ends).
  std::vector<int64_t> issued = {a.groups[0].seq.value_or(-1), a.groups[1].seq.value_or(-1)};
  std::sort(issued.begin(), issued.end());
  EXPECT_EQ(issued, (std::vector<int64_t>{1, 2}));
  const hang_probe::CollectiveEntry* pending = nullptr;
  for (const auto& c : a.collectives)
    if (!c.done) pending = &c;
  ASSERT_NE(pending, nullptr);
  EXPECT_EQ(pending->op, "allreduce");
  EXPECT_EQ(pending->seq, 2);
  EXPECT_EQ(pending->in_sizes, "[[6]]");
  EXPECT_EQ(pending->dtypes, "[\"float32\"]");
  EXPECT_GT(pending->since, 1.7e9);
  EXPECT_LE(pending->since, a.time);

  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  rank0.join();
  rank1.join();
  a = ask(sock[0], 5000);
  for (const auto& c : a.collectives) EXPECT_TRUE(c.done);
  for (const auto& g : a.groups) EXPECT_EQ(g.seq, 2);
  pg.reset();
  EXPECT_TRUE(ask(sock[0], 5001).groups.empty());  // a destroyed group is gone from the answers
  ::close(sock[0]);
  ::close(beats[0]);
}

}  // namespace
}  // namespace cohort
