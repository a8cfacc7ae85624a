// GpuMonitor: NVML opened and shut down once, one line when it is missing, local ranks mapped
// to the GPUs CUDA shows them, and a failure note with the Xids of its round only.
#include "gpu/gpu_monitor.h"

#include "gpu/gpu_preflight.h"
#include "gpu/gpu_text.h"
#include "gpu_health_fixture.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

TEST_F(GpuHealth, TheLibraryIsInitialisedAndShutDownOnce) {
  const std::string calls = dir_ + "/calls";
  ::setenv("COHORT_FAKE_NVML_LOG", calls.c_str(), 1);
  script(device(0));
  {
    auto m = monitor();
    EXPECT_TRUE(m->available());
    EXPECT_EQ(m->snapshot().size(), 1u);
    EXPECT_EQ(m->start(), true);  // a second start opens nothing more
  }
  std::ifstream f(calls);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "init\nshutdown\n");
}

TEST_F(GpuHealth, WithoutNvmlOneLineSaysSoAndEveryFeatureIsQuiet) {
  GpuMonitorOptions o;
  o.library = dir_ + "/nowhere/libnvidia-ml.so.1";
  o.requested = true;
  GpuMonitor m(o, log_);
  EXPECT_FALSE(m.start());
  EXPECT_FALSE(m.start());
  EXPECT_EQ(m.metrics_text(), "");
  EXPECT_EQ(m.condition_of_rank(0), "");
  m.workers_started();
  EXPECT_EQ(m.failure_note(0), "");
  EXPECT_TRUE(m.snapshot().empty());
  EXPECT_EQ(m.state_of_rank(0), std::nullopt);
  run_gpu_preflight(m, "node1", *log_);  // does not throw: nothing to check
  const std::string text = log_text();
  size_t lines = 0;
  for (size_t at = text.find("GPU health is off"); at != std::string::npos;
       at = text.find("GPU health is off", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << text;
  EXPECT_NE(text.find("[warning]"), std::string::npos) << text;  // asked for: a warning
  EXPECT_NE(text.find(o.library), std::string::npos) << text;
}

TEST_F(GpuHealth, LocalRanksMapToTheGpusCudaShowsThem) {
  EXPECT_EQ(node_gpu_names(std::nullopt, "2", 2, 8), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(node_gpu_names(std::nullopt, "gpu", 8, 3), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(node_gpu_names(std::nullopt, "4", 4, 2), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(node_gpu_names(std::string("3,1,-1,2"), "2", 2, 8),
            (std::vector<std::string>{"3", "1"}));  // CUDA stops at -1
  EXPECT_TRUE(node_gpu_names(std::string(""), "auto", 1, 8).empty());

  script(device(0) + "," + device(1, R"("temperature": 91, "throttle": 64)") + "," + device(2));
  auto m = monitor(std::string("1,GPU-00000002"), 3, "3");
  EXPECT_EQ(m->node_gpus(), (std::vector<std::string>{"1", "GPU-00000002"}));
  EXPECT_EQ(m->condition_of_rank(0), "thermal throttle at 91 C");
  ASSERT_TRUE(m->state_of_rank(1));
  EXPECT_EQ(m->state_of_rank(1)->index, 2);  // by UUID prefix
  EXPECT_EQ(m->state_of_rank(2)->index, 1);  // a third worker shares the first GPU
  EXPECT_EQ(m->condition_of_rank(1), "");
  auto ambiguous = monitor(std::string("GPU-0000000"));
  EXPECT_EQ(ambiguous->state_of_rank(0), std::nullopt);  // CUDA would refuse it too
}

TEST_F(GpuHealth, AFailureNoteNamesTheXidsOfItsRoundOnly) {
  const std::string trigger = dir_ + "/xid-now";
  script(device(0, R"("xids": [13, {"xid": 79, "when_exists": ")" + trigger + R"("}])"));
  auto m = monitor();
  EXPECT_EQ(m->failure_note(0),
            "GPU 0 (GPU-00000000-aaaa-bbbb-cccc-dddddddddddd, NVIDIA H200): Xid 13 (graphics "
            "engine exception)");
  m->workers_started();  // the next round: Xid 13 belongs to the last one
  EXPECT_EQ(m->failure_note(0), "");
  std::ofstream(trigger) << "";
  const std::string note = m->failure_note(0);
  EXPECT_NE(note.find("Xid 79 (GPU has fallen off the bus)"), std::string::npos) << note;
  EXPECT_EQ(note.find("Xid 13"), std::string::npos) << note;
  // The metrics count both.
  const std::string text = m->metrics_text();
  EXPECT_NE(text.find("cohort_gpu_xid_events_total{gpu=\"0\",uuid=\"GPU-00000000-aaaa-bbbb-cccc-"
                      "dddddddddddd\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cohort_gpu_last_xid{gpu=\"0\",uuid=\"GPU-00000000-aaaa-bbbb-cccc-"
                      "dddddddddddd\"} 79\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace cohort::launch
