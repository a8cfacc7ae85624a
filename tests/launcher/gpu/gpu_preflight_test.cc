// --gpu-preflight: every problem of every GPU named, the summary thrown, or a line that it passed.
#include "gpu/gpu_preflight.h"

#include "cohort/error.h"
#include "gpu_health_fixture.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

TEST_F(GpuHealth, ThePreflightNamesEveryProblemOfEveryGpu) {
  std::vector<GpuState> gpus(4);
  for (int i = 0; i < 4; ++i) {
    gpus[i].index = i;
    gpus[i].uuid = "GPU-" + std::to_string(i);
    gpus[i].processes_known = true;
  }
  gpus[1].processes.push_back({static_cast<int>(::getpid()), 2147483648ull});
  gpus[1].processes.push_back({4242, std::nullopt});
  gpus[2].ecc_uncorrected = 2;
  gpus[2].xids.push_back({2, 48, 0});
  gpus[2].remap_failed = true;
  gpus[3].error = "GPU is lost";
  auto name_of = [](int pid) { return pid == 4242 ? std::string() : std::string("trainer"); };
  auto problems = preflight_problems({"0", "1", "GPU-2", "3", "7", "MIG-1", "1"}, gpus, name_of);
  ASSERT_EQ(problems.size(), 5u);
  EXPECT_EQ(problems[0].gpu, "GPU 1 (GPU-1)");
  EXPECT_EQ(problems[0].reason, "held by 2 other processes: pid " + std::to_string(::getpid()) +
                                    " (trainer), 2.0 GiB; pid 4242");
  EXPECT_EQ(problems[1].gpu, "GPU 2 (GPU-2)");
  EXPECT_EQ(problems[1].reason,
            "2 uncorrected ECC errors since the driver loaded (reset the GPU, or drain the "
            "node); Xid 48 (double-bit ECC error) reported; row remapping failed (the GPU "
            "needs service)");
  EXPECT_EQ(problems[2].reason, "GPU is lost");
  EXPECT_EQ(problems[3].gpu, "GPU 7");
  EXPECT_EQ(problems[3].reason, "the node would use it, but NVML sees 4 GPUs: 0, 1, 2, 3");
  EXPECT_EQ(problems[4].gpu, "MIG-1");
  EXPECT_TRUE(preflight_problems({"0"}, gpus, name_of).empty());
  auto none = preflight_problems({}, {}, name_of);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].reason.find("NVML sees no GPU"), std::string::npos);
  // The real /proc names a real process.
  EXPECT_EQ(process_name(static_cast<int>(::getpid())).empty(), false);
}

TEST_F(GpuHealth, ThePreflightThrowsTheSummaryOrSaysItPassed) {
  script(device(0) + "," + device(1, R"("processes": [{"pid": 4242, "memory": 536870912}])"));
  auto ok = monitor(std::string("0"));
  EXPECT_NO_THROW(run_gpu_preflight(*ok, "node7", *log_));
  EXPECT_NE(log_text().find("GPU pre-flight passed on node7: GPU 0 (GPU-00000000"),
            std::string::npos)
      << log_text();
  auto busy = monitor(std::nullopt, 2, "2");
  try {
    run_gpu_preflight(*busy, "node7", *log_);
    FAIL() << "a GPU held by another process passed";
  } catch (const GpuPreflightError& e) {
    EXPECT_EQ(std::string(e.what()),
              "GPU pre-flight failed on node7; this node does not join the job:\n"
              "  GPU 1 (GPU-00000001-aaaa-bbbb-cccc-dddddddddddd, NVIDIA H200): held by another "
              "process: pid 4242" +
                  std::string(process_name(4242).empty() ? "" : " (" + process_name(4242) + ")") +
                  ", 512 MiB");
  }
}

}  // namespace
}  // namespace cohort::launch
