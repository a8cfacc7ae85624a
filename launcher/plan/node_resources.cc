#include "plan/node_resources.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sched.h>

#include <fstream>
#include <sstream>
#include <string_view>

#include "cohort/base/parse.h"
#include "cohort/error.h"

namespace cohort::launch {

int cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return 1;
}

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

int count_visible_devices(const std::string& list) {
  if (list.empty() || list == "-1") return 0;
  int n = 0;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) break;
    // CUDA stops at the first invalid entry; negative ids hide the rest.
    if (item[0] == '-') break;
    ++n;
  }
  return n;
}

int count_proc_gpus() {
  DIR* d = ::opendir("/proc/driver/nvidia/gpus");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

int count_driver_gpus() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return 0;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  if (init == nullptr || count == nullptr || init(0) != 0 || count(&n) != 0) n = 0;
  ::dlclose(lib);
  return n;
}

}  // namespace

int gpu_count(const std::map<std::string, std::string>& env) {
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it != env.end()) return count_visible_devices(it->second);
  int n = count_proc_gpus();
  if (n >= 0) return n;
  return count_driver_gpus();
}

int xpu_count(const std::map<std::string, std::string>& env, const std::string& sysfs) {
  auto it = env.find("ZE_AFFINITY_MASK");
  if (it != env.end() && !it->second.empty()) {
    int n = 0;
    std::stringstream ss(it->second);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) ++n;
    return n;
  }
  const std::string drm = sysfs + "/class/drm";
  DIR* d = ::opendir(drm.c_str());
  if (d == nullptr) return 0;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::string_view(e->d_name).rfind("renderD", 0) != 0) continue;
    const std::string dev = drm + "/" + e->d_name + "/device/";
    if (read_first_line(dev + "vendor") == "0x8086" &&
        read_first_line(dev + "class").rfind("0x0380", 0) == 0)
      ++n;
  }
  ::closedir(d);
  return n;
}

int resolve_nproc_per_node(const std::string& spec, const std::map<std::string, std::string>& env) {
  if (spec == "cpu") return cpu_count();
  if (spec == "gpu") {
    int n = gpu_count(env);
    if (n == 0) {
      throw UsageError(
          "--nproc-per-node gpu: no GPU found (no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides "
          "them); give a number or use 'auto'");
    }
    return n;
  }
  if (spec == "xpu") {
    int n = xpu_count(env);
    if (n == 0) {
      throw UsageError(
          "--nproc-per-node xpu: no Intel GPU found (no data-center GPU among /sys/class/drm's "
          "render nodes, and ZE_AFFINITY_MASK is not set); give a number or use 'auto'");
    }
    return n;
  }
  if (spec == "auto") {
    int n = gpu_count(env);
    if (n == 0) n = xpu_count(env);
    return n > 0 ? n : cpu_count();
  }
  if (auto n = parse_int(spec, 1, 1 << 16)) return *n;
  throw UsageError("--nproc-per-node must be a number >= 1, cpu, gpu, xpu or auto (got '" + spec +
                   "')");
}

}  // namespace cohort::launch
