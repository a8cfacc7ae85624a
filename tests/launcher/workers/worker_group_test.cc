// WorkerGroup on a fake spawner (tests/launcher/workers/fake_spawner.h: descriptors the test
// controls, no process is started) and a manual clock: exits and their failures, signals, hangs
// and stack requests, silence and hang probes, spawn failures, output routing, heartbeats and
// step reports, and that no event outlives the group.
#include "workers/worker_group.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <thread>

#include "cohort/base/hang_probe.h"
#include "fake_spawner.h"
#include "loop/console.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;
using testing::FakeSpawner;
namespace fs = std::filesystem;

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), at);
    if (n <= 0) return text;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
}

class WorkerGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort_worker_group_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_NE(console_file_, nullptr);
  }
  void TearDown() override {
    group_.reset();  // before the spawner it uses
    fs::remove_all(dir_);
    std::fclose(console_file_);
  }

  // A group of `n` workers on node 1 (global ranks 4..), stderr piped and kept for the tail.
  GroupSpec spec(int n) {
    GroupSpec g;
    g.node_rank = 1;
    g.base_rank = 4;
    g.host = "n2";
    for (int lr = 0; lr < n; ++lr) {
      WorkerSpec w;
      w.local_rank = lr;
      w.request.argv = {"worker"};
      w.stderr_route.keep_tail = true;
      g.workers.push_back(w);
    }
    return g;
  }
  void start(GroupSpec g) {
    WorkerGroupEvents ev;
    ev.exited = [this](int lr, std::optional<WorkerFailure> f) { exits_[lr] = std::move(f); };
    ev.hung = [this](int lr, WorkerFailure f) { hangs_[lr] = std::move(f); };
    ev.silent = [this](int lr) { silences_.push_back(lr); };
    ev.started = [this](pid_t pid) { started_.push_back(pid); };
    ev.reaped = [this](pid_t pid) { reaped_.push_back(pid); };
    group_ = std::make_unique<WorkerGroup>(io_, clock_, spawner_, error_files_, std::move(g),
                                           std::move(ev));
    group_->start();
  }
  // Runs the loop until `done` holds; false after 10 s of real time.
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.restart();
      io_.run_for(2ms);
    }
    return true;
  }
  // Moves the manual clock and runs what fell due.
  void advance(std::chrono::milliseconds d) {
    clock_.advance(d);
    io_.restart();
    io_.poll();
  }
  bool has_beaten(int lr) {
    return group_->readings().at(static_cast<size_t>(lr)).last_beat.has_value();
  }

  fs::path dir_;
  asio::io_context io_;
  ManualLoopClock clock_{io_};
  FakeSpawner spawner_;
  ErrorFileReader error_files_{io_, clock_, std::chrono::seconds(2)};
  std::FILE* console_file_ = std::tmpfile();
  ConsoleStream console_{io_, ::fileno(console_file_)};
  std::unique_ptr<WorkerGroup> group_;
  std::map<int, std::optional<WorkerFailure>> exits_;
  std::map<int, WorkerFailure> hangs_;
  std::vector<int> silences_;
  // Worker i says hello as the process holding its descriptors, offering probes or not.
  void hello(size_t i, bool probes) {
    heartbeat_pipe::Hello h;
    h.pid = spawner_.proc(i).pid;
    if (probes) h.features.push_back(heartbeat_pipe::kProbeFeature);
    spawner_.write_heartbeat(i, heartbeat_pipe::encode_hello(h));
    ASSERT_TRUE(run_until([&] { return group_->readings().at(i).hello_at.has_value(); }));
  }
  // An answer line to probe `id` from worker i.
  std::string answer(size_t i, int64_t id) {
    hang_probe::ProbeAnswer a;
    a.id = id;
    a.pid = spawner_.proc(i).pid;
    a.threads = {{"MainThread", true, {{"train.py", 7 + static_cast<int>(i), "step", ""}}}};
    return hang_probe::encode_answer(a);
  }
  std::vector<pid_t> started_, reaped_;
};

TEST_F(WorkerGroupTest, ASuccessIsAnExitWithoutAFailureAndAnExitCodeIsOne) {
  start(spec(2));
  ASSERT_EQ(spawner_.count(), 2u);
  EXPECT_TRUE(group_->any_running());
  EXPECT_EQ(group_->running_pids().size(), 2u);
  EXPECT_EQ(started_.size(), 2u);
  spawner_.exit_with(0, 0);
  spawner_.exit_with(1, 3);
  ASSERT_TRUE(run_until([&] { return exits_.size() == 2; }));
  EXPECT_FALSE(exits_.at(0));
  ASSERT_TRUE(exits_.at(1));
  const WorkerFailure& f = *exits_.at(1);
  EXPECT_EQ(f.exit_code, 3);
  EXPECT_EQ(f.reason, "exited with code 3");
  EXPECT_EQ(f.node_rank, 1);
  EXPECT_EQ(f.local_rank, 1);
  EXPECT_EQ(f.global_rank, 5);
  EXPECT_EQ(f.host, "n2");
  EXPECT_EQ(f.pid, spawner_.proc(1).pid);
  EXPECT_FALSE(group_->any_running());
  EXPECT_EQ(reaped_.size(), 2u);
  const auto r = group_->readings();
  EXPECT_FALSE(r[0].failed);
  EXPECT_TRUE(r[1].failed);
  EXPECT_FALSE(r[1].running);
}

TEST_F(WorkerGroupTest, ADeathBySignalCarriesTheStderrTail) {
  start(spec(1));
  spawner_.write_stderr(0, "Traceback (most recent call last):\n  boom\n");
  spawner_.die_of(0, SIGSEGV);
  ASSERT_TRUE(run_until([&] { return exits_.contains(0); }));
  ASSERT_TRUE(exits_.at(0));
  EXPECT_EQ(exits_.at(0)->exit_code, -SIGSEGV);
  EXPECT_EQ(exits_.at(0)->reason, "killed by SIGSEGV (signal 11)");
  EXPECT_EQ(exits_.at(0)->traceback, "Traceback (most recent call last):\n  boom");
}

TEST_F(WorkerGroupTest, AnErrorFileSaysMoreThanTheTail) {
  GroupSpec g = spec(1);
  g.workers[0].error_file = (dir_ / "error.json").string();
  start(g);
  std::ofstream(dir_ / "error.json")
      << R"({"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": "stack", "timestamp": "1"}}})";
  spawner_.write_stderr(0, "tail line\n");
  spawner_.exit_with(0, 1);
  ASSERT_TRUE(run_until([&] { return exits_.contains(0); }));
  const WorkerFailure& f = *exits_.at(0);
  EXPECT_EQ(f.error_file, (dir_ / "error.json").string());
  EXPECT_EQ(f.message, "ValueError: bad");
  EXPECT_EQ(f.traceback, "stack");
  EXPECT_EQ(f.timestamp, 1);  // the worker's own time, earlier than the launcher's
  EXPECT_EQ(f.reason, "exited with code 1");
}

TEST_F(WorkerGroupTest, ASignalGoesToEveryRunningWorkersGroup) {
  start(spec(2));
  spawner_.exit_with(0, 0);
  ASSERT_TRUE(run_until([&] { return exits_.contains(0); }));
  group_->signal(SIGTERM);
  EXPECT_TRUE(spawner_.proc(0).signals.empty());
  EXPECT_EQ(spawner_.proc(1).signals, std::vector<int>{SIGTERM});
  ASSERT_TRUE(run_until([&] { return exits_.contains(1); }));
  EXPECT_EQ(exits_.at(1)->reason, "killed by SIGTERM (signal 15)");
}

TEST_F(WorkerGroupTest, AWorkerThatCannotStartIsAnExitWithAFailure) {
  spawner_.fail_next_spawn = "no such program";
  start(spec(2));
  EXPECT_TRUE(exits_.empty());  // posted, never delivered from inside start()
  ASSERT_TRUE(run_until([&] { return exits_.contains(0); }));
  ASSERT_TRUE(exits_.at(0));
  EXPECT_EQ(exits_.at(0)->exit_code, 1);
  EXPECT_EQ(exits_.at(0)->reason, "could not start: no such program");
  EXPECT_EQ(exits_.at(0)->global_rank, 4);
  EXPECT_EQ(spawner_.count(), 1u);  // the other worker started
  EXPECT_EQ(group_->running_pids(), std::vector<pid_t>{spawner_.proc(0).pid});
}

TEST_F(WorkerGroupTest, ALogFileThatCannotBeOpenedIsAStartFailureNamingIt) {
  GroupSpec g = spec(1);
  g.workers[0].stderr_file = (dir_ / "missing" / "stderr.log").string();
  start(g);
  ASSERT_TRUE(run_until([&] { return exits_.contains(0); }));
  EXPECT_NE(exits_.at(0)->reason.find("could not start: cannot open " +
                                      (dir_ / "missing" / "stderr.log").string()),
            std::string::npos)
      << exits_.at(0)->reason;
  EXPECT_EQ(spawner_.count(), 0u);
}

TEST_F(WorkerGroupTest, OutputGoesToTheConsoleWithItsPrefixAndToTheLogFile) {
  GroupSpec g = spec(1);
  g.workers[0].dir = (dir_ / "attempt_0" / "0").string();
  g.workers[0].request.out = StreamMode::kPipe;
  g.workers[0].stdout_route.console = &console_;
  g.workers[0].stdout_route.prefix = "[default0]:";
  g.workers[0].stdout_file = g.workers[0].dir + "/stdout.log";
  start(g);
  EXPECT_TRUE(fs::is_directory(g.workers[0].dir));  // made before the worker starts
  spawner_.write_stdout(0, "epoch 1\nepoch 2\n");
  spawner_.exit_with(0, 0);
  ASSERT_TRUE(run_until([&] { return exits_.contains(0); }));
  // The exit is reported once the output has drained: all of it is there.
  EXPECT_EQ(read_all(::fileno(console_file_)), "[default0]:epoch 1\n[default0]:epoch 2\n");
  std::ifstream log(g.workers[0].stdout_file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(log), {}), "epoch 1\nepoch 2\n");
}

TEST_F(WorkerGroupTest, BeatsAndStepReportsAreRead) {
  start(spec(1));
  EXPECT_FALSE(has_beaten(0));
  const std::string report =
      heartbeat_pipe::encode_step_report({.step = 12, .step_s = 0.5, .items_per_s = 64});
  ASSERT_EQ(::write(spawner_.proc(0).hb_w, report.data(), report.size()),
            static_cast<ssize_t>(report.size()));
  ASSERT_TRUE(run_until([&] { return group_->readings()[0].last_step.has_value(); }));
  EXPECT_TRUE(has_beaten(0));  // a report is a beat
  EXPECT_EQ(group_->readings()[0].last_step->step, 12);
  EXPECT_DOUBLE_EQ(group_->readings()[0].last_step->items_per_s, 64);
  EXPECT_EQ(group_->readings()[0].pid, spawner_.proc(0).pid);
}

TEST_F(WorkerGroupTest, AWorkerThatStopsBeatingIsAskedForItsStackThenReportedHung) {
  GroupSpec g = spec(1);
  g.hang_timeout = 5s;
  g.stack_grace = 3s;
  spawner_.exit_on_abort = false;  // it does not answer
  start(g);
  spawner_.beat(0);
  ASSERT_TRUE(run_until([&] { return has_beaten(0); }));
  advance(4s);
  spawner_.beat(0);  // a beat within the timeout starts it again
  ASSERT_TRUE(run_until([&] { return clock_.next_deadline() == clock_.now() + 5s; }));
  advance(4s);
  EXPECT_TRUE(spawner_.proc(0).signals.empty());
  advance(1s);
  EXPECT_EQ(spawner_.proc(0).signals, std::vector<int>{SIGABRT});  // its stack, please
  advance(2s);
  EXPECT_TRUE(hangs_.empty());  // within the stack grace
  advance(1s);
  ASSERT_TRUE(run_until([&] { return hangs_.contains(0); }));
  EXPECT_EQ(hangs_.at(0).reason,
            "hung: no heartbeat for 5 s (it did not answer SIGABRT with its stack)");
  EXPECT_EQ(hangs_.at(0).exit_code, -SIGKILL);
  EXPECT_EQ(hangs_.at(0).global_rank, 4);
  EXPECT_TRUE(group_->any_running());  // reported, not stopped: the agent decides
  // When it is stopped, its exit is a consequence of the hang, not a second failure.
  group_->signal(SIGKILL);
  ASSERT_TRUE(run_until([&] { return exits_.contains(0); }));
  EXPECT_FALSE(exits_.at(0));
}

TEST_F(WorkerGroupTest, AHungWorkerThatPrintsItsStackAndDiesIsReportedWithIt) {
  GroupSpec g = spec(1);
  g.hang_timeout = 5s;
  start(g);  // the fake ends on SIGABRT, as Python's faulthandler does
  spawner_.beat(0);
  ASSERT_TRUE(run_until([&] { return has_beaten(0); }));
  spawner_.write_stderr(0, "Fatal Python error: Aborted\nThread 0x1 (most recent call first):\n");
  advance(5s);
  ASSERT_TRUE(run_until([&] { return hangs_.contains(0) && exits_.contains(0); }));
  EXPECT_EQ(hangs_.at(0).reason,
            "hung: no heartbeat for 5 s (its stack, asked for with SIGABRT, below)");
  EXPECT_EQ(hangs_.at(0).exit_code, -SIGABRT);
  EXPECT_EQ(hangs_.at(0).traceback,
            "Fatal Python error: Aborted\nThread 0x1 (most recent call first):");
  EXPECT_FALSE(exits_.at(0));  // the hang is the failure
}

TEST_F(WorkerGroupTest, AWorkerThatNeverBeatsIsNeverHung) {
  GroupSpec g = spec(1);
  g.hang_timeout = 5s;
  start(g);  // a PyTorch script without the cohort module never beats
  advance(60s);
  EXPECT_TRUE(spawner_.proc(0).signals.empty());
  EXPECT_FALSE(clock_.next_deadline());
  EXPECT_TRUE(hangs_.empty());
}

TEST_F(WorkerGroupTest, AWorkerThatAnswersProbesIsReportedSilentNotHungEvenWithoutBeats) {
  GroupSpec g = spec(2);
  g.hang_timeout = 5s;
  start(g);
  hello(0, true);   // cohortrun's worker module: it is watched from its hello on
  hello(1, false);  // says hello but answers no probes: judged by beats alone, as before
  EXPECT_TRUE(group_->readings()[0].answers_probes);
  EXPECT_FALSE(group_->readings()[1].answers_probes);
  EXPECT_FALSE(has_beaten(0));  // a hello is no beat
  advance(4s);
  EXPECT_TRUE(silences_.empty());
  advance(1s);
  ASSERT_TRUE(run_until([&] { return !silences_.empty(); }));
  EXPECT_EQ(silences_, std::vector<int>{0});
  EXPECT_TRUE(spawner_.proc(0).signals.empty());  // no stack request, no verdict: the caller's
  EXPECT_TRUE(hangs_.empty());
  advance(60s);
  EXPECT_EQ(silences_.size(), 1u);  // once, until it beats again
  spawner_.beat(0);
  ASSERT_TRUE(run_until([&] { return has_beaten(0); }));
  advance(5s);
  ASSERT_TRUE(run_until([&] { return silences_.size() == 2; }));
  EXPECT_TRUE(hangs_.empty());
}

TEST_F(WorkerGroupTest, AProbeCollectsEveryAnswerAndSaysWhyOneIsMissing) {
  start(spec(4));
  hello(0, true);
  hello(1, true);
  hello(2, false);
  // Worker 3 never says hello.
  std::optional<std::vector<ProbeReply>> got;
  group_->probe(7, 2s, [&](std::vector<ProbeReply> r) { got = std::move(r); });
  EXPECT_EQ(spawner_.questions(0), "P 7\n");
  EXPECT_EQ(spawner_.questions(1), "P 7\n");
  EXPECT_EQ(spawner_.questions(2), "");  // it does not answer probes: not asked
  // A late answer to an earlier question, then the answer, cut in two.
  spawner_.write_control(0, answer(0, 6));
  const std::string a0 = answer(0, 7);
  spawner_.write_control(0, a0.substr(0, 10));
  ASSERT_TRUE(run_until([&] { return spawner_.questions(0).empty(); }));
  spawner_.write_control(0, a0.substr(10));
  advance(1s);
  EXPECT_FALSE(got);  // worker 1 has not answered
  advance(1s);
  ASSERT_TRUE(run_until([&] { return got.has_value(); }));
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ((*got)[0].answer, a0.substr(0, a0.size() - 1));
  EXPECT_EQ((*got)[0].pid, spawner_.proc(0).pid);
  EXPECT_FALSE((*got)[1].answer);
  EXPECT_NE((*got)[1].no_answer.find("no answer in time"), std::string::npos);
  EXPECT_NE((*got)[2].no_answer.find("does not answer hang probes"), std::string::npos);
  EXPECT_NE((*got)[3].no_answer.find("does not answer hang probes"), std::string::npos);
  EXPECT_TRUE((*got)[3].running);
}

TEST_F(WorkerGroupTest, AProbeEndsAsSoonAsEveryAskedWorkerAnsweredOrExited) {
  start(spec(2));
  hello(0, true);
  hello(1, true);
  std::optional<std::vector<ProbeReply>> got;
  group_->probe(1, 10s, [&](std::vector<ProbeReply> r) { got = std::move(r); });
  spawner_.write_control(0, answer(0, 1));
  spawner_.exit_with(1, 3);
  ASSERT_TRUE(run_until([&] { return got.has_value(); }));  // long before the deadline
  EXPECT_TRUE((*got)[0].answer);
  EXPECT_EQ((*got)[1].no_answer, "it had exited");
  EXPECT_FALSE((*got)[1].running);
  // Nobody to ask: the answer comes at once.
  std::optional<std::vector<ProbeReply>> none;
  spawner_.exit_with(0, 0);
  ASSERT_TRUE(run_until([&] { return !group_->any_running(); }));
  group_->probe(2, 10s, [&](std::vector<ProbeReply> r) { none = std::move(r); });
  ASSERT_TRUE(run_until([&] { return none.has_value(); }));
  EXPECT_EQ(none->size(), 2u);
}

TEST_F(WorkerGroupTest, AnOverlongOrMalformedAnswerIsDroppedAndTheNextOneCounts) {
  start(spec(1));
  hello(0, true);
  std::optional<std::vector<ProbeReply>> got;
  group_->probe(3, 10s, [&](std::vector<ProbeReply> r) { got = std::move(r); });
  spawner_.write_control(0, "not json\n");
  const std::string big = "{\"id\": 3, \"x\": \"" + std::string(hang_probe::kMaxAnswerBytes, 'x');
  // Written from a thread: the socket holds far less than the line.
  std::thread writer([&] { spawner_.write_control(0, big + "\"}\n" + answer(0, 3)); });
  ASSERT_TRUE(run_until([&] { return got.has_value(); }));
  writer.join();
  ASSERT_TRUE((*got)[0].answer);
  EXPECT_EQ(hang_probe::parse_answer(*(*got)[0].answer).threads[0].frames[0].line, 7);
}

TEST_F(WorkerGroupTest, AHungWorkerWithoutAnswerIsAskedForItsStackAndNamedWithItsReason) {
  start(spec(1));
  hello(0, true);
  spawner_.write_stderr(0, "Current thread 0x1 (most recent call first):\n  File \"x.py\"\n");
  group_->report_hung_with_stack(0, "hung: never entered all_reduce ...",
                                 {"rank 5 (n2, pid 7): waits in all_reduce ..."});
  ASSERT_TRUE(run_until([&] { return hangs_.contains(0); }));
  EXPECT_EQ(spawner_.proc(0).signals, std::vector<int>{SIGABRT});
  EXPECT_EQ(hangs_.at(0).reason,
            "hung: never entered all_reduce ... (its stack, asked for with SIGABRT, below)");
  EXPECT_EQ(hangs_.at(0).waiting,
            std::vector<std::string>{"rank 5 (n2, pid 7): waits in all_reduce ..."});
  EXPECT_NE(hangs_.at(0).traceback.find("x.py"), std::string::npos);
}

TEST_F(WorkerGroupTest, AnNcclWorkerIsAskedForItsFlightRecorderThroughPyTorchsPipeFirst) {
  GroupSpec g = spec(1);
  g.workers[0].nccl_pipe_stem = dir_ / "nccl_fr_pipe_";
  g.workers[0].nccl_dump_prefix = dir_ / "nccl_fr_dump_";
  // What ProcessGroupNCCL makes of TORCH_NCCL_DEBUG_INFO_PIPE_FILE: a FIFO it reads.
  const fs::path pipe = dir_ / "nccl_fr_pipe_4.pipe";
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  const int reader = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  start(g);
  hello(0, true);
  group_->report_hung_with_stack(0, "hung: x", {});
  char c = 0;
  ASSERT_EQ(::read(reader, &c, 1), 1);  // asked for the dump
  ::close(reader);
  advance(1s);
  EXPECT_TRUE(spawner_.proc(0).signals.empty());  // the stack request waits for the dump
  std::ofstream(dir_ / "nccl_fr_dump_4") << "pickled entries";
  advance(100ms);
  ASSERT_TRUE(run_until([&] { return hangs_.contains(0); }));
  EXPECT_EQ(spawner_.proc(0).signals, std::vector<int>{SIGABRT});
  EXPECT_NE(hangs_.at(0).reason.find("its NCCL Flight Recorder dump (torchfrtrace reads it): " +
                                     (dir_ / "nccl_fr_dump_4").string()),
            std::string::npos)
      << hangs_.at(0).reason;
}

TEST_F(WorkerGroupTest, AnExpiredFileTimerSignalsItsWorkerAndNamesItInTheFailure) {
  start(spec(2));
  const pid_t pid = spawner_.proc(1).pid;
  EXPECT_FALSE(group_->signal_for_expired_timer(::getpid(), "not ours", SIGKILL));
  EXPECT_TRUE(group_->signal_for_expired_timer(pid, "train_step", SIGKILL));
  EXPECT_EQ(spawner_.proc(1).signals, std::vector<int>{SIGKILL});
  ASSERT_TRUE(run_until([&] { return exits_.contains(1); }));
  EXPECT_EQ(exits_.at(1)->reason,
            "its file timer 'train_step' expired: killed by SIGKILL (signal 9)");
  EXPECT_EQ(exits_.at(1)->message, exits_.at(1)->reason);
  EXPECT_FALSE(group_->signal_for_expired_timer(pid, "train_step", SIGKILL));  // gone
}

TEST_F(WorkerGroupTest, NoEventIsDeliveredAfterTheGroupIsDestroyed) {
  start(spec(2));
  spawner_.exit_with(0, 1);
  group_.reset();  // the exit is pending on the loop
  io_.restart();
  io_.poll();
  EXPECT_TRUE(exits_.empty());
  // The worker it still ran was killed, and the one that had exited was reaped.
  EXPECT_EQ(spawner_.proc(1).signals, std::vector<int>{SIGKILL});
  EXPECT_EQ(spawner_.running(), 0u);
  EXPECT_EQ(reaped_.size(), 2u);
}

}  // namespace
}  // namespace cohort::launch
