// --numa-binding: each worker's CPUs (and memory) near the GPU it uses, with torchrun 2.x's four
// modes (PyTorch's torch/numa/binding.py):
//   node          every allowed CPU of the GPU's NUMA node
//   socket        every allowed CPU of the socket that holds the GPU's node (memory: its nodes)
//   exclusive     the GPU's node's physical cores split evenly among the node's GPUs, whole cores
//                 (all their hardware threads), the first GPUs taking one extra core each when
//                 they do not divide evenly
//   core-complex  one group of cores sharing the largest cache (an L3 "core complex") of the
//                 GPU's node, for each of the node's GPUs in turn, the fullest group first
//
// The machine is read from sysfs (a root given, so that tests use recorded topologies): NUMA
// nodes and their CPUs (/sys/devices/system/node), each CPU's core, socket and largest cache
// (/sys/devices/system/cpu), and the NVIDIA GPUs on the PCI bus with their NUMA node
// (/sys/bus/pci/devices, vendor 0x10de, class 0x03xx). CUDA device i is the i-th GPU in PCI bus
// order (CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA agree exactly), after CUDA_VISIBLE_DEVICES picks
// among them.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cohort/launch/launch_config.h"

namespace cohort::launch {

struct CpuTopology {
  struct Cpu {
    int id = 0;
    int node = 0;
    int core = 0;     // the lowest CPU id among its thread siblings
    int package = 0;  // the socket
    int cache = 0;    // the lowest CPU id sharing its largest data/unified cache
  };
  std::vector<Cpu> cpus;          // the CPUs this process may use
  std::set<int> nodes;            // NUMA nodes with at least one of them
  std::vector<std::string> gpus;  // PCI addresses of the NVIDIA GPUs, in bus order
  std::vector<int> gpu_nodes;     // the NUMA node of each (-1 in sysfs is read as 0)
};

// Reads the topology under `sysfs` ("/sys"), keeping the CPUs in `allowed` (all when empty).
CpuTopology read_cpu_topology(const std::string& sysfs, const std::set<int>& allowed = {});

struct Placement {
  std::set<int> cpus;       // bind the worker to these
  std::set<int> mem_nodes;  // and allocate its memory on these
};

// Where the worker using CUDA device `device` (an index among the visible GPUs) goes.
// `visible`: the GPUs' indices in bus order that CUDA_VISIBLE_DEVICES makes visible (empty: all).
// Throws UsageError saying why it cannot place (no such GPU, fewer cores than GPUs on a node).
Placement place_worker(const CpuTopology& t, NumaBinding mode, int device,
                       const std::vector<int>& visible = {});

// Why binding is pointless here, when it is: no GPU, or a single NUMA node (then every mode but
// exclusive and core-complex binds to all CPUs anyway). nullopt when binding applies.
std::optional<std::string> binding_not_useful(const CpuTopology& t, NumaBinding mode);

// CUDA_VISIBLE_DEVICES's integer entries ("" or unset: none, meaning all GPUs); UUIDs are not
// resolved (binding is then skipped with a note).
std::optional<std::vector<int>> visible_gpu_indices(const std::string& cuda_visible_devices);

// "0-3,8" for {0,1,2,3,8}.
std::string cpu_list_text(const std::set<int>& cpus);

}  // namespace cohort::launch
