// --numa-binding's placement on recorded topologies: a fake sysfs tree written by the test (two
// sockets of two NUMA nodes each, four cores with two threads per node, two core complexes per
// node, four GPUs on nodes 0, 0, 2 and 3).
#include "plan/numa_binding.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "cohort/error.h"

namespace cohort::launch {
namespace {

namespace fs = std::filesystem;

class FakeSysfs {
 public:
  FakeSysfs() {
    char templ[] = "/tmp/cohort_sysfs_XXXXXX";
    root_ = ::mkdtemp(templ);
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text << "\n";
  }
  const std::string& root() const { return root_; }

  // Nodes 0..3 (sockets 0,0,1,1); node n holds cores 4n..4n+3 and their siblings 16+4n..; the
  // core complexes of node n are cores {4n, 4n+1} and {4n+2, 4n+3}. GPUs on `gpu_nodes`.
  void two_sockets(const std::vector<int>& gpu_nodes) {
    for (int n = 0; n < 4; ++n) {
      write("/devices/system/node/node" + std::to_string(n) + "/cpulist",
            std::to_string(4 * n) + "-" + std::to_string(4 * n + 3) + "," +
                std::to_string(16 + 4 * n) + "-" + std::to_string(16 + 4 * n + 3));
    }
    for (int cpu = 0; cpu < 32; ++cpu) {
      const int core = cpu % 16, node = core / 4;
      const int complex_first = node * 4 + (core % 4 < 2 ? 0 : 2);
      const std::string base = "/devices/system/cpu/cpu" + std::to_string(cpu);
      write(base + "/topology/thread_siblings_list",
            std::to_string(core) + "," + std::to_string(core + 16));
      write(base + "/topology/physical_package_id", node < 2 ? "0" : "1");
      write(base + "/cache/index0/type", "Data");
      write(base + "/cache/index0/level", "1");
      write(base + "/cache/index0/shared_cpu_list",
            std::to_string(core) + "," + std::to_string(core + 16));
      write(base + "/cache/index3/type", "Unified");
      write(base + "/cache/index3/level", "3");
      write(base + "/cache/index3/shared_cpu_list",
            std::to_string(complex_first) + "-" + std::to_string(complex_first + 1) + "," +
                std::to_string(complex_first + 16) + "-" + std::to_string(complex_first + 17));
    }
    for (size_t g = 0; g < gpu_nodes.size(); ++g) {
      char addr[32];
      std::snprintf(addr, sizeof addr, "0000:%02zx:00.0", 0x18 + 0x20 * g);
      const std::string base = std::string("/bus/pci/devices/") + addr;
      write(base + "/vendor", "0x10de");
      write(base + "/class", "0x030200");
      write(base + "/numa_node", std::to_string(gpu_nodes[g]));
    }
    // Something on the bus that is not an NVIDIA GPU.
    write("/bus/pci/devices/0000:00:1f.0/vendor", "0x8086");
    write("/bus/pci/devices/0000:00:1f.0/class", "0x060100");
  }

 private:
  std::string root_;
};

std::set<int> cpus(const std::string& list) {
  std::set<int> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    auto dash = item.find('-');
    int lo = std::stoi(item.substr(0, dash));
    int hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
    for (int i = lo; i <= hi; ++i) out.insert(i);
  }
  return out;
}

TEST(NumaBinding, ReadsTheRecordedTopology) {
  FakeSysfs sys;
  sys.two_sockets({0, 0, 2, 3});
  CpuTopology t = read_cpu_topology(sys.root());
  EXPECT_EQ(t.cpus.size(), 32u);
  EXPECT_EQ(t.nodes, (std::set<int>{0, 1, 2, 3}));
  ASSERT_EQ(t.gpus.size(), 4u);
  EXPECT_EQ(t.gpus[0], "0000:18:00.0");
  EXPECT_EQ(t.gpu_nodes, (std::vector<int>{0, 0, 2, 3}));
  EXPECT_EQ(t.cpus[17].core, 1);
  EXPECT_EQ(t.cpus[19].cache, 2);
  // Only the CPUs this process may use.
  EXPECT_EQ(read_cpu_topology(sys.root(), {0, 1, 2}).cpus.size(), 3u);
}

TEST(NumaBinding, EachModePlacesAsPyTorchDoes) {
  FakeSysfs sys;
  sys.two_sockets({0, 0, 2, 3});
  CpuTopology t = read_cpu_topology(sys.root());
  auto node0 = place_worker(t, NumaBinding::kNode, 0);
  EXPECT_EQ(node0.cpus, cpus("0-3,16-19"));
  EXPECT_EQ(node0.mem_nodes, std::set<int>{0});
  auto socket0 = place_worker(t, NumaBinding::kSocket, 1);
  EXPECT_EQ(socket0.cpus, cpus("0-7,16-23"));
  EXPECT_EQ(socket0.mem_nodes, (std::set<int>{0, 1}));
  // Two GPUs share node 0's four cores: two whole cores each.
  EXPECT_EQ(place_worker(t, NumaBinding::kExclusive, 0).cpus, cpus("0-1,16-17"));
  EXPECT_EQ(place_worker(t, NumaBinding::kExclusive, 1).cpus, cpus("2-3,18-19"));
  EXPECT_EQ(place_worker(t, NumaBinding::kExclusive, 2).cpus, cpus("8-11,24-27"));
  // One core complex per GPU of the node.
  EXPECT_EQ(place_worker(t, NumaBinding::kCoreComplex, 0).cpus, cpus("0-1,16-17"));
  EXPECT_EQ(place_worker(t, NumaBinding::kCoreComplex, 1).cpus, cpus("2-3,18-19"));
  EXPECT_EQ(place_worker(t, NumaBinding::kCoreComplex, 3).cpus, cpus("12-13,28-29"));
}

TEST(NumaBinding, VisibleDevicesPickTheGpus) {
  FakeSysfs sys;
  sys.two_sockets({0, 0, 2, 3});
  CpuTopology t = read_cpu_topology(sys.root());
  auto visible = visible_gpu_indices("3,0");
  ASSERT_TRUE(visible);
  EXPECT_EQ(place_worker(t, NumaBinding::kNode, 0, *visible).cpus, cpus("12-15,28-31"));
  EXPECT_EQ(place_worker(t, NumaBinding::kNode, 1, *visible).cpus, cpus("0-3,16-19"));
  EXPECT_FALSE(visible_gpu_indices("GPU-8f2c"));
  EXPECT_EQ(*visible_gpu_indices("1,-1,2"), std::vector<int>{1});  // CUDA stops at -1
}

TEST(NumaBinding, WhatCannotBePlacedSaysWhy) {
  FakeSysfs sys;
  sys.two_sockets({0, 0, 0, 0, 0});  // five GPUs on a node of four cores
  CpuTopology t = read_cpu_topology(sys.root());
  EXPECT_THROW(place_worker(t, NumaBinding::kNode, 7), UsageError);
  try {
    place_worker(t, NumaBinding::kExclusive, 0);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("4 physical core(s) for 5 GPUs"), std::string::npos)
        << e.what();
  }
}

TEST(NumaBinding, NoGpuOrOneNodeIsSaidOnce) {
  FakeSysfs none;
  none.two_sockets({});
  auto why = binding_not_useful(read_cpu_topology(none.root()), NumaBinding::kNode);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("no NVIDIA GPU"), std::string::npos);
  FakeSysfs one;
  one.write("/devices/system/node/node0/cpulist", "0-1");
  one.write("/devices/system/cpu/cpu0/topology/physical_package_id", "0");
  one.write("/devices/system/cpu/cpu1/topology/physical_package_id", "0");
  one.write("/bus/pci/devices/0000:18:00.0/vendor", "0x10de");
  one.write("/bus/pci/devices/0000:18:00.0/class", "0x030000");
  one.write("/bus/pci/devices/0000:18:00.0/numa_node", "-1");
  CpuTopology t = read_cpu_topology(one.root());
  EXPECT_EQ(t.gpu_nodes, std::vector<int>{0});
  ASSERT_TRUE(binding_not_useful(t, NumaBinding::kSocket));
  EXPECT_FALSE(binding_not_useful(t, NumaBinding::kExclusive));
  EXPECT_EQ(cpu_list_text(cpus("0-3,5,7-8")), "0-3,5,7-8");
}

}  // namespace
}  // namespace cohort::launch
