#include "cohort/train/gradient_path.h"

#include <unistd.h>

#include <fstream>
#include <map>

#include "cohort/train/device.h"

namespace cohort::train {

GradientPath decide_gradient_path(const std::vector<std::string>& gpu_ids) {
  const int world = static_cast<int>(gpu_ids.size());
  std::map<std::string, int> first_rank;  // GPU identity -> lowest rank on it
  for (int r = 0; r < world; ++r) {
    if (gpu_ids[r].empty()) {
      return {false, "CPU group: rank " + std::to_string(r) + " has no GPU"};
    }
    const auto [it, fresh] = first_rank.emplace(gpu_ids[r], r);
    if (!fresh) {
      return {false, "CPU group, staged through host memory: ranks " + std::to_string(it->second) +
                         " and " + std::to_string(r) + " share GPU " + gpu_ids[r] +
                         " (machine/PCI bus id) and NCCL needs a GPU per rank; give each rank "
                         "its own GPU (--device cuda, one rank per visible GPU) for NCCL"};
    }
  }
  return {true, "NCCL: " + std::to_string(world) + (world == 1 ? " rank" : " ranks") +
                    ", each on a GPU of its own"};
}

GradientPath agree_gradient_path(Store& store, const std::string& key_prefix, int rank, int world,
                                 const std::string& my_gpu_id, std::chrono::milliseconds timeout) {
  // A leading byte keeps "no GPU" distinct from a key that was never written.
  store.set(key_prefix + std::to_string(rank), "g" + my_gpu_id);
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(key_prefix + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<std::string> values = store.multi_get(keys);
  for (auto& v : values) v = v.empty() ? std::string() : v.substr(1);
  return decide_gradient_path(values);
}

std::string machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (in && std::getline(in, id) && !id.empty()) return id;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

std::string gpu_identity(const Device& dev) {
  const std::string bus = dev.pci_bus_id();
  return bus.empty() ? std::string() : machine_id() + "/" + bus;
}

}  // namespace cohort::train
