// GPU health in-process, through the stand-in NVML (tests/launcher/gpu/fake_nvml): the library
// wrapper reads what the script says, the words and the Prometheus text made of it (promtool
// checks the text), the mapping of local ranks to GPUs, the failure note and the pre-flight's
// verdicts. cohortrun's own use of them is in gpu_cohortrun_test.cc.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../../common/subprocess.h"
#include "cohort/base/logging.h"
#include "gpu/gpu_metrics.h"
#include "gpu/gpu_monitor.h"
#include "gpu/gpu_preflight.h"
#include "gpu/gpu_text.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_library.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

const std::string kFakeNvml = std::string(FAKE_NVML_DIR) + "/libnvidia-ml.so.1";

// A healthy H200-like device; tests change what they need.
std::string device(int i, const std::string& extra = "") {
  return R"({"uuid": "GPU-0000000)" + std::to_string(i) +
         R"(-aaaa-bbbb-cccc-dddddddddddd", "name": "NVIDIA H200",
    "utilization": {"gpu": 97, "memory": 40}, "memory": {"used": 1073741824, "total": 150754820096},
    "temperature": 60, "power_mw": 500000, "power_limit_mw": 700000,
    "clocks_mhz": {"sm": 1980, "mem": 2619}, "throttle": 0,
    "ecc": {"uncorrected": 0, "corrected": 0}, "processes": [],
    "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": false, "failure": false},
    "retired_pages_pending": false)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

class GpuHealth : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort_gpu_health_test_XXXXXX";
    dir_ = ::mkdtemp(templ);
    script_ = dir_ + "/nvml.json";
    ::setenv("COHORT_FAKE_NVML_SCRIPT", script_.c_str(), 1);
    ::unsetenv("COHORT_FAKE_NVML_LOG");
    log_ = private_logger("gpu-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(lines_),
                          "info");
    log_->set_level(spdlog::level::info);
  }
  void TearDown() override {
    ::unsetenv("COHORT_FAKE_NVML_SCRIPT");
    ::unsetenv("COHORT_FAKE_NVML_LOG");
    std::error_code ec;
    if (!HasFailure()) std::filesystem::remove_all(dir_, ec);
  }
  void script(const std::string& devices, const std::string& top = "") {
    std::ofstream(script_) << "{" << top << (top.empty() ? "" : ", ") << "\"devices\": [" << devices
                           << "]}";
  }
  std::unique_ptr<GpuMonitor> monitor(std::optional<std::string> visible = std::nullopt,
                                      int nproc = 1, std::string spec = "1") {
    GpuMonitorOptions o;
    o.library = kFakeNvml;
    o.cuda_visible_devices = std::move(visible);
    o.nproc = nproc;
    o.nproc_spec = std::move(spec);
    auto m = std::make_unique<GpuMonitor>(o, log_);
    m->start();
    return m;
  }
  std::string log_text() {
    log_->flush();
    return lines_.str();
  }

  std::string dir_, script_;
  std::ostringstream lines_;
  std::shared_ptr<spdlog::logger> log_;
};

TEST_F(GpuHealth, TheWrapperReadsEveryScriptedValue) {
  script(device(0, R"("throttle": 72, "temperature": 91, "ecc": {"uncorrected": 2, "corrected": 5},
    "processes": [{"pid": 4242, "memory": 2147483648}, {"pid": 4243}],
    "remapped_rows": {"corrected": 1, "uncorrected": 3, "pending": true, "failure": true},
    "retired_pages_pending": true)"),
         R"("driver": "550.54.15")");
  auto lib = NvmlLibrary::open(kFakeNvml);
  EXPECT_EQ(lib->driver_version(), "550.54.15");
  ASSERT_EQ(lib->device_count(), 1);
  GpuState s = lib->read_device(0);
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.uuid, "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(s.name, "NVIDIA H200");
  EXPECT_EQ(s.utilization_percent, 97u);
  EXPECT_EQ(s.memory_utilization_percent, 40u);
  EXPECT_EQ(s.memory_used_bytes, 1073741824u);
  EXPECT_EQ(s.memory_total_bytes, 150754820096u);
  EXPECT_EQ(s.temperature_c, 91u);
  EXPECT_EQ(s.power_w, 500.0);
  EXPECT_EQ(s.power_limit_w, 700.0);
  EXPECT_EQ(s.sm_clock_mhz, 1980u);
  EXPECT_EQ(s.memory_clock_mhz, 2619u);
  EXPECT_EQ(s.throttle_reasons, nvml::kReasonHwThermalSlowdown | nvml::kReasonHwSlowdown);
  EXPECT_EQ(s.ecc_uncorrected, 2u);
  EXPECT_EQ(s.ecc_corrected, 5u);
  ASSERT_TRUE(s.processes_known);
  ASSERT_EQ(s.processes.size(), 2u);
  EXPECT_EQ(s.processes[0].pid, 4242);
  EXPECT_EQ(s.processes[0].memory_bytes, 2147483648u);
  EXPECT_EQ(s.processes[1].memory_bytes, std::nullopt);  // NVML_VALUE_NOT_AVAILABLE
  EXPECT_EQ(s.remapped_rows_uncorrectable, 3u);
  EXPECT_TRUE(s.remap_pending);
  EXPECT_TRUE(s.remap_failed);
  EXPECT_TRUE(s.retired_pages_pending);
}

TEST_F(GpuHealth, ReadingsNvmlDoesNotSupportStayEmpty) {
  script(R"({"uuid": "GPU-x", "name": "old board", "temperature": 40})");
  auto lib = NvmlLibrary::open(kFakeNvml);
  GpuState s = lib->read_device(0);
  EXPECT_EQ(s.temperature_c, 40u);
  EXPECT_FALSE(s.power_w || s.utilization_percent || s.ecc_uncorrected || s.throttle_reasons);
  EXPECT_FALSE(s.processes_known);
  EXPECT_EQ(describe_condition(s), "");
  EXPECT_EQ(failure_note(s, {}), "");
}

TEST_F(GpuHealth, ALostGpuIsSaidAndNotReadFurther) {
  script(device(0) + "," + device(1, R"("lost": true)"));
  auto lib = NvmlLibrary::open(kFakeNvml);
  GpuState s = lib->read_device(1);
  EXPECT_NE(s.error.find("GPU is lost"), std::string::npos) << s.error;
  EXPECT_FALSE(s.temperature_c || s.memory_total_bytes);
  EXPECT_EQ(describe_condition(s), "GPU is lost");
  EXPECT_EQ(lib->read_device(0).error, "");
}

TEST_F(GpuHealth, AMissingLibraryIsAnNvmlErrorNamingIt) {
  try {
    NvmlLibrary::open(dir_ + "/nowhere/libnvidia-ml.so.1");
    FAIL() << "opened a library that does not exist";
  } catch (const NvmlError& e) {
    EXPECT_EQ(e.code(), -1);
    EXPECT_NE(std::string(e.what()).find(dir_ + "/nowhere/libnvidia-ml.so.1"), std::string::npos)
        << e.what();
  }
}

TEST_F(GpuHealth, AFailedInitIsAnNvmlErrorInNvmlsWords) {
  script("", R"("init": 9)");
  try {
    NvmlLibrary::open(kFakeNvml);
    FAIL() << "nvmlInit_v2 failed, yet the library opened";
  } catch (const NvmlError& e) {
    EXPECT_EQ(e.code(), nvml::kErrorDriverNotLoaded);
    EXPECT_NE(std::string(e.what()).find("nvmlInit_v2 failed: Driver Not Loaded (9)"),
              std::string::npos)
        << e.what();
  }
}

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

TEST_F(GpuHealth, ThrottleReasonsAndXidsInWords) {
  EXPECT_EQ(throttle_reason_words(nvml::kReasonGpuIdle | nvml::kReasonHwThermalSlowdown |
                                  nvml::kReasonSwPowerCap),
            (std::vector<std::string>{"HW thermal slowdown", "SW power cap", "idle"}));
  EXPECT_TRUE(throttle_reason_words(0).empty());
  EXPECT_EQ(describe_xid(79), "Xid 79 (GPU has fallen off the bus)");
  EXPECT_EQ(describe_xid(48), "Xid 48 (double-bit ECC error)");
  EXPECT_EQ(describe_xid(12345), "Xid 12345");
}

TEST_F(GpuHealth, AConditionInAFewWords) {
  GpuState g;
  g.index = 3;
  g.temperature_c = 91;
  g.power_limit_w = 700;
  g.throttle_reasons = nvml::kReasonHwThermalSlowdown | nvml::kReasonHwSlowdown;
  EXPECT_EQ(describe_condition(g), "thermal throttle at 91 C");
  g.throttle_reasons = nvml::kReasonSwPowerCap;
  EXPECT_EQ(describe_condition(g), "power cap at 700 W");
  g.throttle_reasons = nvml::kReasonHwSlowdown;
  EXPECT_EQ(describe_condition(g), "HW slowdown");
  g.throttle_reasons = nvml::kReasonGpuIdle | nvml::kReasonApplicationsClocksSetting;
  EXPECT_EQ(describe_condition(g), "");  // nothing that slows work
  g.ecc_uncorrected = 1;
  g.xids.push_back({3, 63, 0});
  EXPECT_EQ(describe_condition(g),
            "1 uncorrected ECC error, after Xid 63 (ECC page retirement or row remapping "
            "recorded)");
}

TEST_F(GpuHealth, AFailureNoteNamesWhatBearsOnAFailureOnly) {
  GpuState g;
  g.index = 0;
  g.uuid = "GPU-abc";
  g.name = "NVIDIA H200";
  g.temperature_c = 95;
  g.power_limit_w = 700;
  g.throttle_reasons = nvml::kReasonSwPowerCap;  // slows, does not kill
  EXPECT_EQ(failure_note(g, {}), "");
  g.throttle_reasons = nvml::kReasonSwThermalSlowdown;
  g.ecc_uncorrected = 2;
  g.remap_pending = true;
  EXPECT_EQ(failure_note(g, {{0, 79, 1}, {0, 79, 2}, {0, 48, 3}}),
            "GPU 0 (GPU-abc, NVIDIA H200): Xid 79 (GPU has fallen off the bus); Xid 48 "
            "(double-bit ECC error); 2 uncorrected ECC errors since the driver loaded; a row "
            "remap is pending (reset the GPU); thermal throttle at 95 C");
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

// promtool (Debian's prometheus package) lints the text as Prometheus would parse it.
TEST_F(GpuHealth, PromtoolAcceptsTheMetricsText) {
  if (::access("/usr/bin/promtool", X_OK) != 0)
    GTEST_SKIP() << "no /usr/bin/promtool (scripts/setup.sh installs Debian's prometheus)";
  script(device(0, R"("temperature": 91, "throttle": 72, "ecc": {"uncorrected": 2, "corrected": 7},
    "processes": [{"pid": 4242, "memory": 1024}], "xids": [79])") +
         "," + device(1, R"("name": "odd \"name\" \\ here")") + "," + device(2, R"("lost": true)") +
         R"(, {"uuid": "GPU-bare"})");
  auto m = monitor();
  const std::string text = m->metrics_text();
  const std::string u0 = "gpu=\"0\",uuid=\"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd\"";
  for (const std::string& line :
       {"cohort_gpu_temperature_celsius{" + u0 + "} 91\n",
        "cohort_gpu_utilization_ratio{" + u0 + "} 0.97\n",
        "cohort_gpu_memory_total_bytes{" + u0 + "} 150754820096\n",
        "cohort_gpu_power_watts{" + u0 + "} 500\n",
        "cohort_gpu_sm_clock_hertz{" + u0 + "} 1980000000\n",
        "cohort_gpu_clock_throttle{" + u0 + ",reason=\"hw_thermal_slowdown\"} 1\n",
        "cohort_gpu_clock_throttle{" + u0 + ",reason=\"sw_power_cap\"} 0\n",
        "cohort_gpu_ecc_errors_total{" + u0 + ",error=\"uncorrected\"} 2\n",
        "cohort_gpu_compute_processes{" + u0 + "} 1\n", "cohort_gpu_last_xid{" + u0 + "} 79\n",
        std::string("cohort_gpu_info{gpu=\"1\",uuid=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\","
                    "name=\"odd \\\"name\\\" \\\\ here\"} 1\n"),
        std::string("cohort_gpu_up{gpu=\"2\",uuid=\"\"} 0\n"),
        std::string("# TYPE cohort_gpu_ecc_errors_total counter\n")}) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "in:\n" << text;
  }
  // The bare device (uuid only) has no temperature series.
  EXPECT_EQ(text.find("cohort_gpu_temperature_celsius{gpu=\"3\""), std::string::npos);

  const std::string file = dir_ + "/metrics.prom";
  std::ofstream(file) << text;
  testing::Subprocess p({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file}, {},
                        /*merge_stderr=*/true);
  const std::string out = p.read_all_stdout(20s);
  auto status = p.wait(20s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out << "\n" << text;
  EXPECT_EQ(out, "") << text;  // no lint findings either
}

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
