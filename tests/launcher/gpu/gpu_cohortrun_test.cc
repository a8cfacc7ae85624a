// cohortrun's GPU features on real processes, with the stand-in NVML (tests/launcher/gpu/fake_nvml)
// found where the real one would be: on LD_LIBRARY_PATH, under the name libnvidia-ml.so.1.
// --gpu-preflight keeps a node with a busy or failing GPU out of the job and names the GPU; a
// dead worker's summary carries what NVML said about its GPU; without NVML, every feature says
// once that it is off and the job runs as it would have.
#include <gtest/gtest.h>

#include "../launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

const std::string kUuid0 = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd";
const std::string kUuid1 = "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd";

std::string device(int i, const std::string& extra = "") {
  return R"({"uuid": "GPU-0000000)" + std::to_string(i) +
         R"(-aaaa-bbbb-cccc-dddddddddddd", "name": "NVIDIA H200",
    "memory": {"used": 0, "total": 150754820096}, "temperature": 60, "throttle": 0,
    "ecc": {"uncorrected": 0, "corrected": 0}, "processes": [],
    "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": false, "failure": false})" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

class GpuCohortrun : public LauncherTest {
 protected:
  // The environment that makes cohortrun find the stand-in, answering `devices`.
  std::vector<std::string> nvml_env(const std::string& devices, const std::string& top = "") {
    const std::string script = dir_ + "/nvml.json";
    std::ofstream(script) << "{" << top << (top.empty() ? "" : ", ") << "\"devices\": [" << devices
                          << "]}";
    // Two GPUs for the workers, whatever the machine running the test says.
    return {"LD_LIBRARY_PATH=" FAKE_NVML_DIR, "COHORT_FAKE_NVML_SCRIPT=" + script,
            "CUDA_VISIBLE_DEVICES=0,1"};
  }
};

TEST_F(GpuCohortrun, APreflightFailureNamesTheGpuAndTheNodeNeverJoins) {
  auto env = nvml_env(device(0) + "," +
                      device(1, R"("processes": [{"pid": )" + std::to_string(::getpid()) +
                                    R"(, "memory": 2147483648}])"));
  auto r = run(cohortrun({"--gpu-preflight", "--nproc-per-node", "2"}, test_worker({})), env);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_NE(r.err.find("cohortrun: GPU pre-flight failed on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; this node does not join the job:\n  GPU 1 (" + kUuid1 +
                       ", NVIDIA H200): held by another process: pid " +
                       std::to_string(::getpid()) + " (launcher_gpu_he), 2.0 GiB\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("GPU 0 ("), std::string::npos) << r.err;  // GPU 0 is fine
  EXPECT_FALSE(exists(worker_file(0, 0, "env")));                // no worker ever started
  EXPECT_FALSE(exists(worker_file(1, 0, "env")));
}

TEST_F(GpuCohortrun, PendingErrorsAndAnInvisibleGpuFailThePreflight) {
  auto env = nvml_env(device(0, R"("ecc": {"uncorrected": 3, "corrected": 0}, "xids": [48],
      "remapped_rows": {"corrected": 0, "uncorrected": 1, "pending": true, "failure": false})"));
  auto r = run(cohortrun({"--gpu-preflight", "--devices", "0,3"}, test_worker({})), env);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_NE(r.err.find("  GPU 0 (" + kUuid0 +
                       ", NVIDIA H200): 3 uncorrected ECC errors since the driver loaded (reset "
                       "the GPU, or drain the node); Xid 48 (double-bit ECC error) reported; a "
                       "row remap is pending (reset the GPU)\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("  GPU 3: the node would use it, but NVML sees 1 GPU: 0\n"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(exists(worker_file(0, 0, "env")));
}

TEST_F(GpuCohortrun, HealthyGpusPassAndOnlyTheNodesOwnAreChecked) {
  // GPU 2 is busy, but --devices gives the workers GPUs 1 and 0.
  auto env = nvml_env(device(0) + "," + device(1) + "," +
                      device(2, R"("processes": [{"pid": 4242, "memory": 1024}])"));
  env.push_back("LOGLEVEL=INFO");
  auto r = run(cohortrun({"--gpu-preflight", "--devices", "1,0"}, test_worker({})), env);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("GPU pre-flight passed on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(": GPU 1 (" + kUuid1 + ", NVIDIA H200), GPU 0 (" + kUuid0),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(exists(worker_file(0, 0, "env")));
  EXPECT_TRUE(exists(worker_file(1, 0, "env")));
}

TEST_F(GpuCohortrun, ADeadWorkersSummarySaysWhatNvmlSaidAboutItsGpu) {
  // Xid 79 happens while the workers run: once rank 0 has written its environment file.
  auto env = nvml_env(device(0, R"("temperature": 91, "throttle": 72,
                   "xids": [{"xid": 79, "when_exists": ")" +
                                    worker_file(0, 0, "env") + R"("}])") +
                      "," + device(1));
  auto r =
      run(cohortrun({"--nproc-per-node", "2"}, test_worker({"--exit-code", "3", "--on-rank", "0"})),
          env);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_NE(r.err.find("  gpu       : GPU 0 (" + kUuid0 +
                       ", NVIDIA H200): Xid 79 (GPU has fallen off the bus); thermal throttle at "
                       "91 C\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(count_of(r.err, "  gpu       : "), 1u) << r.err;
  EXPECT_NE(r.err.find("exitcode  : 3"), std::string::npos) << r.err;
}

TEST_F(GpuCohortrun, WithoutNvmlEveryFeatureSaysOnceThatItIsOff) {
  // A path that does not exist, so that a GPU machine's real NVML is not found either.
  const std::vector<std::string> no_nvml{"COHORT_NVML_LIBRARY=" + dir_ +
                                         "/nowhere/libnvidia-ml.so.1"};
  auto r = run(cohortrun({"--gpu-preflight", "--nproc-per-node", "2"},
                         test_worker({"--exit-code", "3", "--on-rank", "1"})),
               no_nvml);
  EXPECT_EQ(r.exit_code(), 1) << r.err;  // the worker's failure, as without the flag
  EXPECT_EQ(count_of(r.err, "GPU health is off: "), 1u) << r.err;
  EXPECT_NE(r.err.find("[warning] GPU health is off: " + dir_ + "/nowhere/libnvidia-ml.so.1: "),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("  gpu       : "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pre-flight failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Root Cause (first observed failure):\n[1]:"), std::string::npos) << r.err;
  EXPECT_TRUE(exists(worker_file(0, 0, "env")));  // the job ran

  // nvmlInit failing is off too, in NVML's words.
  auto init =
      run(cohortrun({"--gpu-preflight"}, test_worker({})), nvml_env(device(0), R"("init": 9)"));
  EXPECT_EQ(init.exit_code(), 0) << init.err;
  EXPECT_EQ(count_of(init.err, "GPU health is off: "), 1u) << init.err;
  EXPECT_NE(init.err.find("nvmlInit_v2 failed: Driver Not Loaded (9)"), std::string::npos)
      << init.err;

  // Not asked for: not a word at the default level, and the job is as it was.
  auto quiet = run(cohortrun({}, test_worker({})), no_nvml);
  EXPECT_EQ(quiet.exit_code(), 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("GPU"), std::string::npos) << quiet.err;
  auto info = run(cohortrun({}, test_worker({})), {no_nvml[0], "LOGLEVEL=INFO"});
  EXPECT_EQ(count_of(info.err, "[info] GPU health is off: "), 1u) << info.err;
}

}  // namespace
}  // namespace cohort::testing
