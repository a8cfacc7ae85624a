// A stand-in for NVIDIA's libnvidia-ml.so.1, for tests on machines without a GPU. It exports the
// NVML functions cohort uses, under their versioned names (and only those: a caller that asked
// for an unversioned name would not find it), with the C types of NVML's public nvml.h, declared
// here on their own rather than taken from cohort's launcher/gpu/nvml_api.h, so that a mistake
// there is not repeated here.
//
// It answers from a script, a JSON file named by COHORT_FAKE_NVML_SCRIPT, read by nvmlInit_v2:
//   {"init": 0,                        nvmlInit_v2's return code (9: driver not loaded)
//    "driver": "550.54.15",
//    "devices": [{
//      "uuid": "GPU-...", "name": "NVIDIA H200",
//      "lost": false,                   every device call answers GPU_IS_LOST (15)
//      "utilization": {"gpu": 97, "memory": 40},
//      "memory": {"used": bytes, "total": bytes},
//      "temperature": 91, "power_mw": 650000, "power_limit_mw": 700000,
//      "clocks_mhz": {"sm": 1980, "mem": 2619},
//      "throttle": 96,                  nvmlClocksEventReasons bits
//      "ecc": {"uncorrected": 2, "corrected": 5},
//      "processes": [{"pid": 4242, "memory": bytes}],
//      "xids": [79, {"xid": 48, "when_exists": "/path"}],
//                                       Xid events, delivered once to each event set registered
//                                       for the device: at once, or once the file exists (a
//                                       test's way to make an Xid happen while a worker runs)
//      "remapped_rows": {"corrected": 0, "uncorrected": 1, "pending": true, "failure": false},
//      "retired_pages_pending": false,
//      "events": true}]}                whether Xid events can be registered (default true)
// A reading whose key is absent answers NVML_ERROR_NOT_SUPPORTED (3).
// With COHORT_FAKE_NVML_LOG set, nvmlInit_v2 and nvmlShutdown append "init" and "shutdown" lines
// to that file (tests check that the library is initialised and shut down once).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;
typedef struct {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;
typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;
}

struct nvmlDevice_st {
  int index;
};
struct nvmlEventSet_st {
  struct Scheduled {
    nvmlEventData_t event;
    std::string when_exists;  // "": due now
  };
  std::deque<Scheduled> scheduled;
};

namespace {

constexpr nvmlReturn_t kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3,
                       kInsufficientSize = 7, kTimeout = 10, kGpuIsLost = 15, kUnknown = 999;
constexpr unsigned long long kXidEvent = 0x8ull;

std::mutex g_mu;
nlohmann::json g_script;
bool g_initialised = false;
nvmlDevice_st g_devices[64];

void log_call(const char* what) {
  const char* path = std::getenv("COHORT_FAKE_NVML_LOG");
  if (path == nullptr || *path == '\0') return;
  std::ofstream(path, std::ios::app) << what << "\n";
}

// The device's script entry, or null (with *rc set) when the call must fail.
const nlohmann::json* device(nvmlDevice_t d, nvmlReturn_t* rc) {
  if (!g_initialised) {
    *rc = kUninitialized;
    return nullptr;
  }
  if (d == nullptr || d < g_devices || d >= g_devices + 64) {
    *rc = kInvalidArgument;
    return nullptr;
  }
  const auto& devs = g_script["devices"];
  const size_t i = static_cast<size_t>(d->index);
  if (i >= devs.size()) {
    *rc = kInvalidArgument;
    return nullptr;
  }
  if (devs[i].value("lost", false)) {
    *rc = kGpuIsLost;
    return nullptr;
  }
  return &devs[i];
}

// dev[key] (or dev[key][sub]) as T into *out; NOT_SUPPORTED when absent.
template <typename T>
nvmlReturn_t read(nvmlDevice_t d, const char* key, const char* sub, T* out) {
  std::lock_guard lock(g_mu);
  nvmlReturn_t rc = kSuccess;
  const nlohmann::json* dev = device(d, &rc);
  if (dev == nullptr) return rc;
  if (out == nullptr) return kInvalidArgument;
  if (!dev->contains(key)) return kNotSupported;
  const nlohmann::json& v = (*dev)[key];
  if (sub != nullptr) {
    if (!v.contains(sub)) return kNotSupported;
    *out = v[sub].get<T>();
  } else {
    *out = v.get<T>();
  }
  return kSuccess;
}

nvmlReturn_t copy_string(const std::string& s, char* buf, unsigned int len) {
  if (buf == nullptr || len == 0) return kInvalidArgument;
  if (s.size() + 1 > len) return kInsufficientSize;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return kSuccess;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2() {
  std::lock_guard lock(g_mu);
  log_call("init");
  const char* path = std::getenv("COHORT_FAKE_NVML_SCRIPT");
  if (path == nullptr) return kUnknown;
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  try {
    g_script = nlohmann::json::parse(text.str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake NVML: cannot read %s: %s\n", path, e.what());
    return kUnknown;
  }
  const int rc = g_script.value("init", 0);
  if (rc != kSuccess) return rc;
  for (int i = 0; i < 64; ++i) g_devices[i].index = i;
  g_initialised = true;
  return kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown() {
  std::lock_guard lock(g_mu);
  log_call("shutdown");
  if (!g_initialised) return kUninitialized;
  g_initialised = false;
  return kSuccess;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 9:
      return "Driver Not Loaded";
    case 15:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetDriverVersion(char* buf,
                                                                               unsigned int len) {
  std::lock_guard lock(g_mu);
  if (!g_initialised) return kUninitialized;
  return copy_string(g_script.value("driver", "0.0"), buf, len);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* n) {
  std::lock_guard lock(g_mu);
  if (!g_initialised) return kUninitialized;
  if (n == nullptr) return kInvalidArgument;
  *n = static_cast<unsigned>(g_script.value("devices", nlohmann::json::array()).size());
  return kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i,
                                                                                  nvmlDevice_t* d) {
  std::lock_guard lock(g_mu);
  if (!g_initialised) return kUninitialized;
  if (d == nullptr || i >= g_script["devices"].size() || i >= 64) return kInvalidArgument;
  *d = &g_devices[i];
  return kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* buf,
                                                                      unsigned int len) {
  std::string s;
  nvmlReturn_t rc = read(d, "uuid", nullptr, &s);
  return rc == kSuccess ? copy_string(s, buf, len) : rc;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* buf,
                                                                      unsigned int len) {
  std::string s;
  nvmlReturn_t rc = read(d, "name", nullptr, &s);
  return rc == kSuccess ? copy_string(s, buf, len) : rc;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUtilizationRates(
    nvmlDevice_t d, nvmlUtilization_t* u) {
  if (u == nullptr) return kInvalidArgument;
  nvmlReturn_t rc = read(d, "utilization", "gpu", &u->gpu);
  return rc == kSuccess ? read(d, "utilization", "memory", &u->memory) : rc;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d,
                                                                            nvmlMemory_t* m) {
  if (m == nullptr) return kInvalidArgument;
  nvmlReturn_t rc = read(d, "memory", "used", &m->used);
  if (rc == kSuccess) rc = read(d, "memory", "total", &m->total);
  if (rc == kSuccess) m->free = m->total - m->used;
  return rc;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d,
                                                                             int sensor,
                                                                             unsigned int* t) {
  if (sensor != 0) return kInvalidArgument;  // NVML_TEMPERATURE_GPU
  return read(d, "temperature", nullptr, t);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d,
                                                                            unsigned int* mw) {
  return read(d, "power_mw", nullptr, mw);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(
    nvmlDevice_t d, unsigned int* mw) {
  return read(d, "power_limit_mw", nullptr, mw);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type,
                                                                           unsigned int* mhz) {
  // NVML_CLOCK_SM 1, NVML_CLOCK_MEM 2.
  if (type == 1) return read(d, "clocks_mhz", "sm", mhz);
  if (type == 2) return read(d, "clocks_mhz", "mem", mhz);
  return kNotSupported;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(
    nvmlDevice_t d, unsigned long long* bits) {
  return read(d, "throttle", nullptr, bits);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTotalEccErrors(
    nvmlDevice_t d, int error_type, int counter_type, unsigned long long* n) {
  if (counter_type != 0) return kNotSupported;  // only the volatile counters are scripted
  return read(d, "ecc", error_type == 1 ? "uncorrected" : "corrected", n);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned int* count, nvmlProcessInfo_t* infos) {
  nlohmann::json procs;
  nvmlReturn_t rc = read(d, "processes", nullptr, &procs);
  if (rc != kSuccess) return rc;
  if (count == nullptr) return kInvalidArgument;
  const unsigned n = static_cast<unsigned>(procs.size());
  if (*count < n || (n > 0 && infos == nullptr)) {
    *count = n;
    return kInsufficientSize;
  }
  for (unsigned i = 0; i < n; ++i) {
    infos[i].pid = procs[i].value("pid", 0u);
    infos[i].usedGpuMemory = procs[i].value("memory", ~0ull);
    infos[i].gpuInstanceId = 0xFFFFFFFFu;
    infos[i].computeInstanceId = 0xFFFFFFFFu;
  }
  *count = n;
  return kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetRemappedRows(
    nvmlDevice_t d, unsigned int* corr, unsigned int* unc, unsigned int* pending,
    unsigned int* failure) {
  if (!corr || !unc || !pending || !failure) return kInvalidArgument;
  bool p = false, f = false;
  nvmlReturn_t rc = read(d, "remapped_rows", "corrected", corr);
  if (rc == kSuccess) rc = read(d, "remapped_rows", "uncorrected", unc);
  if (rc == kSuccess) rc = read(d, "remapped_rows", "pending", &p);
  if (rc == kSuccess) rc = read(d, "remapped_rows", "failure", &f);
  *pending = p;
  *failure = f;
  return rc;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(
    nvmlDevice_t d, int* pending) {
  bool p = false;
  nvmlReturn_t rc = read(d, "retired_pages_pending", nullptr, &p);
  if (rc == kSuccess) *pending = p ? 1 : 0;  // NVML_FEATURE_ENABLED / _DISABLED
  return rc;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  std::lock_guard lock(g_mu);
  if (!g_initialised) return kUninitialized;
  if (set == nullptr) return kInvalidArgument;
  *set = new nvmlEventSet_st;
  return kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceRegisterEvents(
    nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
  std::lock_guard lock(g_mu);
  nvmlReturn_t rc = kSuccess;
  const nlohmann::json* dev = device(d, &rc);
  if (dev == nullptr) return rc;
  if (set == nullptr) return kInvalidArgument;
  if (!dev->value("events", true)) return kNotSupported;
  if (types & kXidEvent) {
    for (const auto& x : dev->value("xids", nlohmann::json::array())) {
      const bool plain = x.is_number();
      const unsigned long long xid = plain ? x.get<unsigned long long>() : x.value("xid", 0ull);
      set->scheduled.push_back({{d, kXidEvent, xid, 0xFFFFFFFFu, 0xFFFFFFFFu},
                                plain ? std::string() : x.value("when_exists", "")});
    }
  }
  return kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set,
                                                                        nvmlEventData_t* data,
                                                                        unsigned int) {
  std::lock_guard lock(g_mu);
  if (!g_initialised) return kUninitialized;
  if (set == nullptr || data == nullptr) return kInvalidArgument;
  // The first event that is due; none is ever waited for.
  for (auto it = set->scheduled.begin(); it != set->scheduled.end(); ++it) {
    if (!it->when_exists.empty() && ::access(it->when_exists.c_str(), F_OK) != 0) continue;
    *data = it->event;
    set->scheduled.erase(it);
    return kSuccess;
  }
  return kTimeout;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  delete set;
  return kSuccess;
}

}  // extern "C"
