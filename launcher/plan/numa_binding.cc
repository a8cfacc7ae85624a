#include "plan/numa_binding.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "cohort/base/parse.h"
#include "cohort/error.h"

namespace cohort::launch {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

// "0-2,4" -> {0,1,2,4}; malformed parts are skipped.
std::set<int> parse_list(const std::string& text) {
  std::set<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto dash = item.find('-');
    auto lo = parse_int(item.substr(0, dash), 0, 1 << 20);
    auto hi = dash == std::string::npos ? lo : parse_int(item.substr(dash + 1), 0, 1 << 20);
    if (!lo || !hi) continue;
    for (int i = *lo; i <= *hi; ++i) out.insert(i);
  }
  return out;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') out.push_back(e->d_name);
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// The lowest CPU sharing the largest data or unified cache of `cpu` (the CPU itself if unknown).
int largest_cache(const std::string& sysfs, int cpu) {
  const std::string base = sysfs + "/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache";
  int best_level = -1, best = cpu;
  for (const auto& e : entries(base)) {
    if (e.rfind("index", 0) != 0) continue;
    const std::string type = read_line(base + "/" + e + "/type");
    if (type != "Data" && type != "Unified") continue;
    auto level = parse_int(read_line(base + "/" + e + "/level"), 0, 16);
    if (!level || *level <= best_level) continue;
    auto shared = parse_list(read_line(base + "/" + e + "/shared_cpu_list"));
    if (shared.empty()) continue;
    best_level = *level;
    best = *shared.begin();
  }
  return best;
}

std::set<int> cpus_where(const CpuTopology& t,
                         const std::function<bool(const CpuTopology::Cpu&)>& f) {
  std::set<int> out;
  for (const auto& c : t.cpus)
    if (f(c)) out.insert(c.id);
  return out;
}

}  // namespace

CpuTopology read_cpu_topology(const std::string& sysfs, const std::set<int>& allowed) {
  CpuTopology t;
  const std::string nodes = sysfs + "/devices/system/node";
  std::map<int, int> node_of;
  for (const auto& e : entries(nodes)) {
    if (e.rfind("node", 0) != 0) continue;
    auto n = parse_int(e.substr(4), 0, 1 << 16);
    if (!n) continue;
    for (int cpu : parse_list(read_line(nodes + "/" + e + "/cpulist"))) node_of[cpu] = *n;
  }
  const std::string cpus = sysfs + "/devices/system/cpu";
  for (const auto& e : entries(cpus)) {
    if (e.rfind("cpu", 0) != 0) continue;
    auto id = parse_int(e.substr(3), 0, 1 << 20);
    if (!id || (!allowed.empty() && !allowed.contains(*id))) continue;
    const std::string topo = cpus + "/" + e + "/topology/";
    CpuTopology::Cpu c;
    c.id = *id;
    c.node = node_of.contains(*id) ? node_of[*id] : 0;
    auto siblings = parse_list(read_line(topo + "thread_siblings_list"));
    c.core = siblings.empty() ? *id : *siblings.begin();
    c.package = parse_int(read_line(topo + "physical_package_id"), -1, 1 << 16).value_or(0);
    c.cache = largest_cache(sysfs, *id);
    t.cpus.push_back(c);
    t.nodes.insert(c.node);
  }
  std::sort(t.cpus.begin(), t.cpus.end(), [](auto& a, auto& b) { return a.id < b.id; });
  const std::string pci = sysfs + "/bus/pci/devices";
  for (const auto& addr : entries(pci)) {
    const std::string dev = pci + "/" + addr + "/";
    if (read_line(dev + "vendor") != "0x10de" || read_line(dev + "class").rfind("0x03", 0) != 0)
      continue;
    t.gpus.push_back(addr);
    t.gpu_nodes.push_back(
        std::max(0, parse_int(read_line(dev + "numa_node"), -1, 1 << 16).value_or(0)));
  }
  return t;
}

std::optional<std::vector<int>> visible_gpu_indices(const std::string& text) {
  std::vector<int> out;
  if (text.empty()) return out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item[0] == '-') break;  // CUDA stops at an invalid entry
    auto i = parse_int(item, 0, 1 << 16);
    if (!i) return std::nullopt;  // a UUID or MIG name: not ours to resolve
    out.push_back(*i);
  }
  return out;
}

std::optional<std::string> binding_not_useful(const CpuTopology& t, NumaBinding mode) {
  if (t.gpus.empty())
    return "--numa-binding: no NVIDIA GPU on this machine's PCI bus; workers are not bound";
  if (t.nodes.size() <= 1 && (mode == NumaBinding::kNode || mode == NumaBinding::kSocket))
    return "--numa-binding: this machine has one NUMA node; workers are not bound";
  return std::nullopt;
}

Placement place_worker(const CpuTopology& t, NumaBinding mode, int device,
                       const std::vector<int>& visible) {
  std::vector<int> order = visible;
  if (order.empty())
    for (int i = 0; i < static_cast<int>(t.gpus.size()); ++i) order.push_back(i);
  if (device < 0 || device >= static_cast<int>(order.size()) ||
      order[static_cast<size_t>(device)] >= static_cast<int>(t.gpus.size())) {
    throw UsageError("--numa-binding: CUDA device " + std::to_string(device) +
                     " is not among this machine's " + std::to_string(t.gpus.size()) +
                     " visible GPU(s)");
  }
  const size_t gpu = static_cast<size_t>(order[static_cast<size_t>(device)]);
  const int node = t.gpu_nodes[gpu];
  // The visible GPUs on the same node, in device order, and this one's place among them.
  std::vector<size_t> peers;
  for (int g : order)
    if (g < static_cast<int>(t.gpus.size()) && t.gpu_nodes[static_cast<size_t>(g)] == node)
      peers.push_back(static_cast<size_t>(g));
  const size_t place =
      static_cast<size_t>(std::find(peers.begin(), peers.end(), gpu) - peers.begin());

  Placement p;
  p.mem_nodes = {node};
  switch (mode) {
    case NumaBinding::kNone:
      break;
    case NumaBinding::kNode:
      p.cpus = cpus_where(t, [&](const auto& c) { return c.node == node; });
      break;
    case NumaBinding::kSocket: {
      std::set<int> packages;
      for (const auto& c : t.cpus)
        if (c.node == node) packages.insert(c.package);
      p.cpus = cpus_where(t, [&](const auto& c) { return packages.contains(c.package); });
      p.mem_nodes.clear();
      for (const auto& c : t.cpus)
        if (packages.contains(c.package)) p.mem_nodes.insert(c.node);
      break;
    }
    case NumaBinding::kExclusive: {
      std::map<int, std::set<int>> cores;  // core -> its CPUs, on the node
      for (const auto& c : t.cpus)
        if (c.node == node) cores[c.core].insert(c.id);
      const size_t per = cores.size() / peers.size(), extra = cores.size() % peers.size();
      if (per < 1) {
        throw UsageError("--numa-binding exclusive: NUMA node " + std::to_string(node) + " has " +
                         std::to_string(cores.size()) + " physical core(s) for " +
                         std::to_string(peers.size()) + " GPUs");
      }
      const size_t start = place * per + std::min(place, extra);
      const size_t end = start + per + (place < extra ? 1 : 0);
      size_t i = 0;
      for (const auto& [core, cpus] : cores) {
        if (i >= start && i < end) p.cpus.insert(cpus.begin(), cpus.end());
        ++i;
      }
      break;
    }
    case NumaBinding::kCoreComplex: {
      std::map<int, std::set<int>> groups;  // cache -> its CPUs, on the node
      for (const auto& c : t.cpus)
        if (c.node == node) groups[c.cache].insert(c.id);
      std::vector<std::set<int>> by_size;
      for (auto& [cache, cpus] : groups) by_size.push_back(cpus);
      // The fullest groups first (ties: the lowest CPU), as PyTorch orders them.
      std::stable_sort(by_size.begin(), by_size.end(),
                       [](const auto& a, const auto& b) { return a.size() > b.size(); });
      if (!by_size.empty()) p.cpus = by_size[place % by_size.size()];
      break;
    }
  }
  return p;
}

std::string cpu_list_text(const std::set<int>& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    int lo = *it, hi = lo;
    ++it;
    while (it != cpus.end() && *it == hi + 1) hi = *it++;
    if (!out.empty()) out += ',';
    out += lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
  }
  return out;
}

}  // namespace cohort::launch
